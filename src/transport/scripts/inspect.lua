-- Inspect: what this node holds under KEYS, read at once, changing nothing.
-- Returns the node's TIME (seconds, microseconds), then one entry per key:
--   {'none', -2}                                   no such key
--   {'string', pttl, value}                        a token, a counter
--   {'hash', pttl, field, value, ...}              a reentrant lock (HGETALL)
--   {'zset', pttl, member, score, ...}             readers, by expiry (at most 4096)
--   {type, pttl}                                   any other type
-- pttl as PTTL answers it (-1: no expiry).
local time = redis.call('TIME')
local out = {time[1], time[2]}
for i, key in ipairs(KEYS) do
  local kind = redis.call('TYPE', key).ok
  local entry = {kind, redis.call('PTTL', key)}
  local rest = {}
  if kind == 'string' then
    rest = {redis.call('GET', key)}
  elseif kind == 'hash' then
    rest = redis.call('HGETALL', key)
  elseif kind == 'zset' then
    rest = redis.call('ZRANGE', key, 0, 4095, 'WITHSCORES')
  end
  for j = 1, #rest do
    entry[j + 2] = rest[j]
  end
  out[i + 2] = entry
end
return out
