-- Acquire: set the lock key to our token if it is free.
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] TTL in ms; ARGV[3] the holder's
-- label (ours.lua; may be empty).
-- Returns status OK when set, else the holder's PTTL (-1: the key has no expiry),
-- so a waiter knows how long it may sleep.
-- A waiter in line (line.lua) adds KEYS[2], KEYS[3] its line and ARGV[4] its
-- id, ARGV[5] its ticket, ARGV[6] its patience: a key kept for it is free to
-- it, and a refusal keeps it in line and returns {PTTL, waiters ahead}
-- (line.lua, line_wait).
if #KEYS == 1 then
  if redis.call('SET', KEYS[1], labeled(ARGV[1], ARGV[3]), 'NX', 'PX', ARGV[2]) then
    return redis.status_reply('OK')
  end
  return redis.call('PTTL', KEYS[1])
end
local me = line_name('w', ARGV[4], ARGV[6])
local value = redis.pcall('GET', KEYS[1])
if value == false or value == KEPT .. me then
  redis.call('SET', KEYS[1], labeled(ARGV[1], ARGV[3]), 'PX', ARGV[2])
  line_leave(KEYS[2], KEYS[3], me)
  return redis.status_reply('OK')
end
local pttl = redis.call('PTTL', KEYS[1])
return line_wait(KEYS[2], KEYS[3], me, ARGV[5], ARGV[6], pttl, node_now())
