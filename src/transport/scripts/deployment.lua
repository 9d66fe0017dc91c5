-- The deployment record (docs/agreement.md): this node's id, the members'
-- ids and max_ttl, and which member each client address is.
-- KEYS[1] the record, a hash: id, members (ids joined by ','), max_ttl
-- (ms), and seen:<address> = a member's id, at most ARGV[5] of those.
-- ARGV[1] an id for this node, kept only if it has none.
-- ARGV[2] members and ARGV[3] max_ttl to record, only where none is ('':
-- read only); ARGV[4] the member this node is, written with the record
-- (a member that lost its data; '' keeps its id).
-- ARGV[6] k, then k addresses to look up, then address, id pairs to
-- record where the node holds a record and knows no member there.
-- Returns {id, members, max_ttl, then the member at each address looked
-- up}, '' for what is not there.
-- HGETALL, HSET and HSETNX, which the scripts' users may run already
-- (operations.md §5d).
redis.call('HSETNX', KEYS[1], 'id', ARGV[1])
if ARGV[2] ~= '' and redis.call('HSETNX', KEYS[1], 'members', ARGV[2]) == 1 then
  redis.call('HSET', KEYS[1], 'max_ttl', ARGV[3])
  if ARGV[4] ~= '' then
    redis.call('HSET', KEYS[1], 'id', ARGV[4])
  end
end
local flat = redis.call('HGETALL', KEYS[1])
local m = {}
local seen = 0
for i = 1, #flat, 2 do
  m[flat[i]] = flat[i + 1]
  if string.sub(flat[i], 1, 5) == 'seen:' then
    seen = seen + 1
  end
end
local k = tonumber(ARGV[6])
if m.members then
  for i = 7 + k, #ARGV - 1, 2 do
    local field = 'seen:' .. ARGV[i]
    if not m[field] and seen < tonumber(ARGV[5]) then
      redis.call('HSET', KEYS[1], field, ARGV[i + 1])
      m[field] = ARGV[i + 1]
      seen = seen + 1
    end
  end
end
local out = {m.id, m.members or '', m.max_ttl or ''}
for i = 7, 6 + k do
  out[#out + 1] = m['seen:' .. ARGV[i]] or ''
end
return out
