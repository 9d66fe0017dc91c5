-- Release a reader: remove ARGV[1] from the readers KEYS[2] (the set's key
-- goes with its last member). KEYS as acquire_read.lua. A reader that waited
-- in line adds ARGV[2] its id and ARGV[3] its patience: it leaves the line.
-- Returns 1 when removed, 0 when not a reader here. A removal is published on
-- the writer key's channel with the token, to wake waiting writers (see
-- src/engine/wakeup.rs).
if ARGV[2] then
  local me = 'r' .. ARGV[3] .. ':' .. ARGV[2]
  redis.call('ZREM', KEYS[4], me)
  redis.call('ZREM', KEYS[5], me)
end
local removed = redis.pcall('ZREM', KEYS[2], ARGV[1])
if removed ~= 1 then
  return 0
end
notify(KEYS[1], ARGV[1])
return 1
