-- Fenced acquire, phase 1: take the lease and draw a fencing counter.
-- KEYS[1] lock key; KEYS[2] fence counter (no TTL); ARGV[1] token; ARGV[2] TTL ms;
-- ARGV[3] the holder's label (ours.lua; may be empty).
-- Free: INCR the counter, floored at the node's clock in microseconds (a
-- counter a restart lost starts again above every token its clock has
-- seen pass: docs/fencing.md, "Restarts"), SET the lease, return {1, counter}.
-- Held: return {0, PTTL} (-1: no expiry); nothing changes.
-- A waiter in line adds KEYS[3], KEYS[4] and ARGV[4..6], as acquire.lua; its
-- refusal is {0, PTTL, waiters ahead}.
-- A period adds its mark as the last key (so an odd count) and its ms as
-- the last argument, as acquire.lua.
local period = #KEYS % 2 == 1 and KEYS[#KEYS]
local mark = period_left(period)
local me = #KEYS >= 4 and line_name('w', ARGV[4], ARGV[6])
local value = redis.pcall('GET', KEYS[1])
if mark or (value ~= false and not (me and value == KEPT .. me)) then
  local pttl = period_pttl(KEYS[1], mark)
  if me then
    local refused = line_wait(KEYS[3], KEYS[4], me, ARGV[5], ARGV[6], pttl, node_now())
    return {0, pttl, refused[2]}
  end
  return {0, pttl}
end
local counter = redis.call('INCR', KEYS[2])
local t = redis.call('TIME')
local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
if counter < floor then
  counter = floor
  redis.call('SET', KEYS[2], string.format('%.0f', floor))
end
redis.call('SET', KEYS[1], labeled(ARGV[1], ARGV[3]), 'PX', ARGV[2])
period_begin(period, ARGV[1], ARGV[#ARGV])
if me then
  line_leave(KEYS[3], KEYS[4], me)
end
return {1, counter}
