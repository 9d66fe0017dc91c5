-- Release several lock keys: delete each one that holds our token.
-- KEYS: the lock keys; ARGV[1] token. Returns 1 if any was deleted, else 0
-- (either way none of ours is left on this node).
local deleted = 0
for _, key in ipairs(KEYS) do
  if ours(redis.pcall('GET', key), ARGV[1]) then
    deleted = deleted + redis.call('DEL', key)
    notify(key, ARGV[1])
  end
end
if deleted > 0 then
  return 1
end
return 0
