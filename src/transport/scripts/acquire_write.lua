-- Write lock: set the writer key KEYS[1] to ARGV[1] for ARGV[2] ms if neither a
-- writer nor a live reader stands, and clear the writer intent KEYS[3].
-- KEYS as acquire_read.lua. Returns OK when set. A writer (or the readers'
-- turn, or a lock kept for another waiter) standing: its PTTL (-1: no
-- expiry). Readers standing: the longest reader's time left, after marking
-- the writer's intent (which refuses new readers) for that long plus the TTL,
-- never shortening another writer's intent: the readers drain, and the
-- writer is not starved by new ones. The intent takes the latest writer's
-- mark ARGV[4], the same for every attempt of one wait, so that the
-- writer's release (release_write.lua) clears it wherever it was refused,
-- on a node that missed its later attempts too. ARGV[3] is the writer's
-- label (ours.lua; may be empty). A waiter (ARGV[5..7]: its id, ticket and
-- patience) takes a lock kept for it as free, and a refusal keeps it in line
-- ({PTTL, waiters ahead}).
local me = ARGV[5] and line_name('w', ARGV[5], ARGV[7])
local now = node_now()
local value = redis.pcall('GET', KEYS[1])
if value ~= false and not (me and value == KEPT .. me) then
  local pttl = redis.call('PTTL', KEYS[1])
  if me then
    return line_wait(KEYS[4], KEYS[5], me, ARGV[6], ARGV[7], pttl, now)
  end
  return pttl
end
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. now)
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
if #last > 0 then
  local left = tonumber(last[2]) - now
  local keep = math.max(redis.call('PTTL', KEYS[3]), left + ttl)
  redis.call('SET', KEYS[3], ARGV[4], 'PX', keep)
  if me then
    return line_wait(KEYS[4], KEYS[5], me, ARGV[6], ARGV[7], left, now)
  end
  return left
end
redis.call('SET', KEYS[1], labeled(ARGV[1], ARGV[3]), 'PX', ttl)
redis.call('DEL', KEYS[3])
if me then
  line_leave(KEYS[4], KEYS[5], me)
end
return redis.status_reply('OK')
