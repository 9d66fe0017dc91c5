-- Once per period (LockOptions::hold_at_least; docs/guarantees.md, "Once
-- per period"): a grant marks the period with a key of its own, set to the
-- holder's token for the period. An acquire with a period is refused while
-- the mark stands; a release leaves it; a refused round's undo takes it
-- back. A script given a period has its mark as the last key, and an
-- acquire the period in ms as the last argument.
-- The mark's PTTL while it stands (-1: no expiry), else false.
local function period_left(mark)
  if not mark then
    return false
  end
  local pttl = redis.call('PTTL', mark)
  if pttl == -2 then
    return false
  end
  return pttl
end
local function period_begin(mark, token, ms)
  if mark then
    redis.call('SET', mark, token, 'PX', ms)
  end
end
local function period_undo(mark, token)
  if mark and redis.pcall('GET', mark) == token then
    redis.call('DEL', mark)
  end
end
-- A refusal's time left: the holder's key's, or where it is gone the
-- mark's.
local function period_pttl(key, mark)
  local pttl = redis.call('PTTL', key)
  if pttl == -2 and mark then
    return mark
  end
  return pttl
end
