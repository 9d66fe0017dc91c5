-- Release: delete the lock key only if it still holds our token.
-- KEYS[1] lock key; ARGV[1] token. Returns 1 when deleted, 0 when not ours.
-- pcall: a key of another type is simply not ours.
-- With KEYS[2], KEYS[3] the resource's line (line.lua), the key is kept for
-- the first waiter in it instead of deleted. A holder (or a waiter giving
-- up) that waited in line adds ARGV[2] its id and ARGV[3] its patience: it
-- leaves the line first, and a key kept for it is given on too.
-- A refused round's undo of a grant with a period adds the mark as the last
-- key (so an even count): taken back where it holds our token (period.lua).
-- A release is published on the channel named after the key, with the token,
-- to wake waiters (notify.lua).
local period = #KEYS % 2 == 0 and KEYS[#KEYS]
period_undo(period, ARGV[1])
local me = ARGV[2] and line_name('w', ARGV[2], ARGV[3])
local value = redis.pcall('GET', KEYS[1])
if me then
  line_leave(KEYS[2], KEYS[3], me)
end
if not ours(value, ARGV[1]) and not (me and value == KEPT .. me) then
  return 0
end
local kept = #KEYS >= 3 and line_hand_over(KEYS[1], KEYS[2], KEYS[3])
if not kept then
  redis.call('DEL', KEYS[1])
end
notify(KEYS[1], ARGV[1], kept)
if ours(value, ARGV[1]) then
  return 1
end
return 0
