-- Release a writer: delete the writer key KEYS[1] if it holds ARGV[1], and the
-- writer intent KEYS[3] if it holds ARGV[1] (left where readers refused this
-- writer; a later writer's intent is not ours to clear). KEYS as
-- acquire_read.lua. Returns 1 when either was deleted, 0 when neither was
-- ours. A deletion is published on the writer key's channel with the token,
-- to wake waiters (see src/wakeup.rs); pcall: a key of another type is simply
-- not ours, and a user not allowed to publish still releases.
local deleted = 0
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  deleted = 1
end
if redis.pcall('GET', KEYS[3]) == ARGV[1] then
  redis.call('DEL', KEYS[3])
  deleted = 1
end
if deleted == 1 then
  redis.pcall('PUBLISH', KEYS[1], ARGV[1])
end
return deleted
