-- Acquire: set the lock key to our token if it is free.
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] TTL in ms; ARGV[3] the holder's
-- label (ours.lua; may be empty).
-- Returns status OK when set, else the holder's PTTL (-1: the key has no expiry),
-- so a waiter knows how long it may sleep.
-- A waiter in line (line.lua) adds KEYS[2], KEYS[3] its line and ARGV[4] its
-- id, ARGV[5] its ticket, ARGV[6] its patience: a key kept for it is free to
-- it, and a refusal keeps it in line and returns {PTTL, waiters ahead}
-- (line.lua, line_wait).
-- A period (period.lua) adds its mark as the last key (so an even count)
-- and its ms as the last argument: refused while the mark stands, with the
-- PTTL of the holder's key or else of the mark.
local period = #KEYS % 2 == 0 and KEYS[#KEYS]
local mark = period_left(period)
if #KEYS <= 2 then
  if not mark and redis.call('SET', KEYS[1], labeled(ARGV[1], ARGV[3]), 'NX', 'PX', ARGV[2]) then
    period_begin(period, ARGV[1], ARGV[#ARGV])
    return redis.status_reply('OK')
  end
  return period_pttl(KEYS[1], mark)
end
local me = line_name('w', ARGV[4], ARGV[6])
local value = redis.pcall('GET', KEYS[1])
if not mark and (value == false or value == KEPT .. me) then
  redis.call('SET', KEYS[1], labeled(ARGV[1], ARGV[3]), 'PX', ARGV[2])
  period_begin(period, ARGV[1], ARGV[#ARGV])
  line_leave(KEYS[2], KEYS[3], me)
  return redis.status_reply('OK')
end
local pttl = period_pttl(KEYS[1], mark)
return line_wait(KEYS[2], KEYS[3], me, ARGV[5], ARGV[6], pttl, node_now())
