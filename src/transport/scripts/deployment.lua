-- The deployment record (docs/agreement.md): this node's id, the members'
-- ids, the next members' while the membership changes, max_ttl and the
-- record's epoch, and which member each client address is.
-- KEYS[1] the record, a hash: id, members and next (ids joined by ','),
-- max_ttl (ms), epoch, and seen:<address> = a member's id, at most ARGV[5]
-- of those.
-- ARGV[1] an id for this node, kept only if it has none.
-- ARGV[2] members, ARGV[3] max_ttl, ARGV[6] epoch and ARGV[7] next to
-- record ('' members: read only), only where no record is or the one held
-- has a lower epoch; ARGV[4] the member this node is, written with the
-- record (a member that lost its data; '' keeps its id).
-- ARGV[8] k, then k addresses to look up, then address, id pairs to
-- record where the node holds a record: the member a client reached there
-- (a new address while fewer than ARGV[5] are known; a known one that
-- names another member is corrected, as an address given to another
-- server since).
-- Returns {id, members, max_ttl, epoch, next, then the member at each
-- address looked up}, '' for what is not there.
-- HGETALL, HSET and HSETNX, which the scripts' users may run already
-- (operations.md §5d).
redis.call('HSETNX', KEYS[1], 'id', ARGV[1])
local flat = redis.call('HGETALL', KEYS[1])
local m = {}
local seen = 0
for i = 1, #flat, 2 do
  m[flat[i]] = flat[i + 1]
  if string.sub(flat[i], 1, 5) == 'seen:' then
    seen = seen + 1
  end
end
if ARGV[2] ~= '' and (not m.members or tonumber(m.epoch or '0') < tonumber(ARGV[6])) then
  m.members, m.max_ttl, m.epoch, m.next = ARGV[2], ARGV[3], ARGV[6], ARGV[7]
  redis.call('HSET', KEYS[1], 'members', m.members, 'max_ttl', m.max_ttl,
    'epoch', m.epoch, 'next', m.next)
  if ARGV[4] ~= '' then
    m.id = ARGV[4]
    redis.call('HSET', KEYS[1], 'id', m.id)
  end
end
local k = tonumber(ARGV[8])
if m.members then
  for i = 9 + k, #ARGV - 1, 2 do
    local field = 'seen:' .. ARGV[i]
    local known = m[field]
    if known ~= ARGV[i + 1] and (known or seen < tonumber(ARGV[5])) then
      redis.call('HSET', KEYS[1], field, ARGV[i + 1])
      m[field] = ARGV[i + 1]
      if not known then
        seen = seen + 1
      end
    end
  end
end
local out = {m.id, m.members or '', m.max_ttl or '', m.epoch or '', m.next or ''}
for i = 9, 8 + k do
  out[#out + 1] = m['seen:' .. ARGV[i]] or ''
end
return out
