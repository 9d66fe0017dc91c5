-- Fair waiting (docs/design.md, "Fair waiting"), shared by the scripts that
-- take or give back a lock a waiter may be in line for.
-- A resource's line is two sorted sets: LINE, waiter -> ticket (its place:
-- lowest first; SERVED added once a lock is being kept for it) and ALIVE,
-- waiter -> deadline on this node's clock (ms). A waiter past its deadline
-- has left; both keys expire with the last deadline, so a waiter that dies
-- leaves nothing behind. A waiter is named kind .. patience .. ':' .. id:
-- kind 'w' (a lock, a permit, a writer) or 'r' (a reader), patience how long
-- a lock is kept for it (ms).
local LINE_MAX = 1024
local KEPT = '\0line:'
local READERS_TURN = '\0readers'
-- 2^52: above every ticket (ms since the epoch), and exact in a double.
local SERVED = '4503599627370496'
local function node_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function line_name(kind, id, patience)
  return kind .. patience .. ':' .. id
end
-- Joins, or stays in, the line with `ticket` until `deadline`; a full line
-- takes no one new. A waiter a lock is being kept for is left as it is:
-- served, until the lock kept for it lapses (its deadline), after which it
-- joins again in its place.
local function line_join(line, alive, who, ticket, deadline, now)
  local until_ = redis.call('ZSCORE', alive, who)
  if until_ == false then
    if redis.call('ZCARD', alive) >= LINE_MAX then
      return
    end
  elseif tonumber(until_) >= now and tonumber(redis.call('ZSCORE', line, who) or 0) >= tonumber(SERVED) then
    return
  end
  redis.call('ZADD', line, ticket, who)
  redis.call('ZADD', alive, deadline, who)
  local last = redis.call('ZRANGE', alive, -1, -1, 'WITHSCORES')
  local at = tonumber(last[2]) + 1
  redis.call('PEXPIREAT', line, at)
  redis.call('PEXPIREAT', alive, at)
end
-- How many waiters not yet served are ahead of `who` in line (a lower
-- ticket), counted up to LINE_AHEAD: 0 for one being served; LINE_AHEAD
-- for one not in line (the line was full). A waiter NEAR_HEAD or more back
-- sleeps until a release names it, polling after FAR_STEP ms per waiter
-- ahead and up to FAR_STEP more (src/proto/retry.rs): it stays in line that
-- long.
local LINE_AHEAD = 64
local NEAR_HEAD = 2
local FAR_STEP = 250
local function line_ahead(line, who)
  local ticket = redis.call('ZSCORE', line, who)
  if ticket == false then
    return LINE_AHEAD
  end
  if tonumber(ticket) >= tonumber(SERVED) then
    return 0
  end
  return #redis.call('ZRANGEBYSCORE', line, 0, '(' .. ticket, 'LIMIT', 0, LINE_AHEAD)
end
-- A refused waiter stays in line for the holder's time left (pttl, -1 for
-- none) and an eighth more, or, far back, its poll's pause (line_ahead),
-- and its patience. Returns the refusal: {pttl, waiters ahead of it}, so
-- that a waiter far back sleeps until its turn is announced
-- (docs/design.md, "Fair waiting").
local function line_wait(line, alive, who, ticket, patience, pttl, now)
  local left = math.max(tonumber(pttl), 0)
  local away = left + math.floor(left / 8)
  line_join(line, alive, who, ticket, now + away + tonumber(patience), now)
  local ahead = line_ahead(line, who)
  if ahead >= NEAR_HEAD then
    local far = FAR_STEP * (ahead + 1)
    if far > away then
      line_join(line, alive, who, ticket, now + far + tonumber(patience), now)
    end
  end
  return {pttl, ahead}
end
local function line_leave(line, alive, who)
  redis.call('ZREM', line, who)
  redis.call('ZREM', alive, who)
end
-- Keeps `key` for the line's first waiter not yet served (readers: for
-- every reader, READERS_TURN), for its patience at most and never past its
-- deadline; a served waiter's deadline becomes the kept lock's end. Returns
-- whom it is kept for — the waiter's name, or 'r' for the readers — or
-- false (nothing kept) when no one waits: the release names them to the
-- waiters (notify.lua), so that only they wake.
local function line_hand_over(key, line, alive)
  if redis.call('EXISTS', line) == 0 then
    return false
  end
  local now = node_now()
  local gone = redis.call('ZRANGEBYSCORE', alive, '-inf', '(' .. now, 'LIMIT', 0, 64)
  if #gone > 0 then
    redis.call('ZREM', line, unpack(gone))
    redis.call('ZREM', alive, unpack(gone))
  end
  local head = redis.call('ZRANGEBYSCORE', line, 0, '(' .. SERVED, 'LIMIT', 0, 1)[1]
  if not head then
    return false
  end
  local left = tonumber(redis.call('ZSCORE', alive, head)) - now
  local keep = math.max(math.min(tonumber(string.match(head, '^%a(%d+):')), left), 1)
  if string.sub(head, 1, 1) == 'r' then
    redis.call('SET', key, READERS_TURN, 'PX', keep)
    return 'r'
  end
  redis.call('SET', key, KEPT .. head, 'PX', keep)
  redis.call('ZINCRBY', line, SERVED, head)
  redis.call('ZADD', alive, 'XX', now + keep, head)
  return head
end
