-- Release a reader: remove ARGV[1] from the readers KEYS[2] (the set's key
-- goes with its last member). KEYS as acquire_read.lua. A reader that waited
-- in line adds ARGV[2] its id and ARGV[3] its patience: it leaves the line,
-- and the readers' turn with it when no other live reader waits.
-- Returns 1 when removed, 0 when not a reader here. A removal is published on
-- the writer key's channel with the token, to wake waiting writers (see
-- src/engine/wakeup.rs).
if ARGV[2] then
  local me = 'r' .. ARGV[3] .. ':' .. ARGV[2]
  redis.call('ZREM', KEYS[4], me)
  redis.call('ZREM', KEYS[5], me)
  -- The readers' turn (line.lua, READERS_TURN) ends with the last live
  -- reader in line to leave: kept for no one, it would hold writers off for
  -- its patience.
  if redis.pcall('GET', KEYS[1]) == READERS_TURN then
    local now, waits = node_now(), false
    for _, who in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
      if string.sub(who, 1, 1) == 'r' and tonumber(redis.call('ZSCORE', KEYS[5], who) or -1) >= now then
        waits = true
        break
      end
    end
    if not waits then
      redis.call('DEL', KEYS[1])
      notify(KEYS[1], ARGV[1])
    end
  end
end
local removed = redis.pcall('ZREM', KEYS[2], ARGV[1])
if removed ~= 1 then
  return 0
end
notify(KEYS[1], ARGV[1])
return 1
