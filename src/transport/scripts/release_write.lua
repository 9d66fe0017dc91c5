-- Release a writer: the writer key KEYS[1] if it holds ARGV[1] (kept for the
-- first waiter in line, line.lua, or deleted), and the writer intent KEYS[3]
-- if it holds ARGV[2], the writer's intent mark (left where readers refused
-- this writer; a later writer's intent is not ours to clear). KEYS as
-- acquire_read.lua. A writer that waited in line adds ARGV[3] its id and
-- ARGV[4] its patience: it leaves the line first, and a writer key kept for
-- it is given on too. Returns 1
-- when the writer key or the intent was ours, 0 when neither was. A release
-- is published on the writer key's channel with the token, to wake waiters
-- (see src/engine/wakeup.rs); pcall: a key of another type is simply not ours, and
-- a user not allowed to publish still releases.
local me = ARGV[3] and line_name('w', ARGV[3], ARGV[4])
if me then
  line_leave(KEYS[4], KEYS[5], me)
end
local released, changed, kept = 0, false, false
local value = redis.pcall('GET', KEYS[1])
if ours(value, ARGV[1]) or (me and value == KEPT .. me) then
  kept = line_hand_over(KEYS[1], KEYS[4], KEYS[5])
  if not kept then
    redis.call('DEL', KEYS[1])
  end
  changed = true
  if ours(value, ARGV[1]) then
    released = 1
  end
end
if redis.pcall('GET', KEYS[3]) == ARGV[2] then
  redis.call('DEL', KEYS[3])
  released, changed = 1, true
end
if changed then
  notify(KEYS[1], ARGV[1], kept)
end
return released
