-- Acquire several lock keys at once: all of them or none.
-- KEYS: the lock keys; ARGV[1] token; ARGV[2] TTL in ms; ARGV[3] the holder's
-- label (ours.lua; may be empty).
-- Returns status OK when all were set; otherwise sets nothing and returns the
-- smallest PTTL among the keys already held (-1 when none of them expires).
local pttl = -1
local held = false
for _, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 1 then
    held = true
    local p = redis.call('PTTL', key)
    if p >= 0 and (pttl < 0 or p < pttl) then
      pttl = p
    end
  end
end
if held then
  return pttl
end
for _, key in ipairs(KEYS) do
  redis.call('SET', key, labeled(ARGV[1], ARGV[3]), 'PX', ARGV[2])
end
return redis.status_reply('OK')
