-- Acquire or re-enter: a hash {owner: hold count} under the lock key, plus one
-- field per hold, named "\255" .. hold token (no UTF-8 owner name starts with
-- byte 255, so the two never meet).
-- KEYS[1] lock key; ARGV[1] owner; ARGV[2] TTL in ms; ARGV[3] hold token;
-- ARGV[4] the owner's label (may be empty), kept in field "\254" from the
-- first hold on (no UTF-8 owner name starts with byte 254 either).
-- Free: create it with count 1. Held by this owner: count + 1 unless this hold
-- is already counted (so applying one hold twice counts it once), expiry pushed
-- out to at least the TTL (never shortened). Otherwise: the holder's PTTL
-- (-1: no expiry), as acquire.lua answers. A plain lock (a string) is another
-- holder.
local kind = redis.call('TYPE', KEYS[1]).ok
local ttl = tonumber(ARGV[2])
local hold = '\255' .. ARGV[3]
if kind == 'none' then
  redis.call('HSET', KEYS[1], ARGV[1], 1, hold, 1)
  if ARGV[4] and ARGV[4] ~= '' then
    redis.call('HSET', KEYS[1], '\254', ARGV[4])
  end
  redis.call('PEXPIRE', KEYS[1], ttl)
  return redis.status_reply('OK')
end
if kind == 'hash' and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  if redis.call('HSETNX', KEYS[1], hold, 1) == 1 then
    redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  end
  if redis.call('PTTL', KEYS[1]) < ttl then
    redis.call('PEXPIRE', KEYS[1], ttl)
  end
  return redis.status_reply('OK')
end
return redis.call('PTTL', KEYS[1])
