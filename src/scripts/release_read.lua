-- Release a reader: remove ARGV[1] from the readers KEYS[2] (the set's key
-- goes with its last member). KEYS as acquire_read.lua. Returns 1 when removed,
-- 0 when not a reader here. A removal is published on the writer key's channel
-- with the token, to wake waiting writers (see src/wakeup.rs).
local removed = redis.pcall('ZREM', KEYS[2], ARGV[1])
if removed ~= 1 then
  return 0
end
redis.pcall('PUBLISH', KEYS[1], ARGV[1])
return 1
