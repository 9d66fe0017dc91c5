-- Give a permit back: if the slot KEYS[1] holds ARGV[1], keep it for the first
-- waiter in line (line.lua) or delete it, and leave the holders KEYS[2] (the
-- count KEYS[3] goes with the last holder). KEYS as acquire_permit.lua. A
-- holder (or a waiter giving up) that waited in line adds ARGV[2] its id and
-- ARGV[3] its patience: it leaves the line first, and a slot kept for it is
-- given on too. Returns 1 when the slot was ours, else 0. Published as
-- release.lua does.
local me = ARGV[2] and line_name('w', ARGV[2], ARGV[3])
if me then
  line_leave(KEYS[4], KEYS[5], me)
end
redis.pcall('ZREM', KEYS[2], ARGV[1])
if redis.pcall('EXISTS', KEYS[2]) == 0 then
  redis.call('DEL', KEYS[3])
end
local value = redis.pcall('GET', KEYS[1])
if not ours(value, ARGV[1]) and not (me and value == KEPT .. me) then
  return 0
end
local kept = line_hand_over(KEYS[1], KEYS[4], KEYS[5])
if not kept then
  redis.call('DEL', KEYS[1])
end
notify(KEYS[1], ARGV[1], kept)
if ours(value, ARGV[1]) then
  return 1
end
return 0
