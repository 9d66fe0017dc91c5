-- The dataset mark, for clients that trust durable restarts
-- (docs/design.md §4b): since when this node's dataset has been continuous.
-- KEYS[1] the mark, a hash (node clock ms): run, at, since (the process
-- that stamped it last, when, since when its dataset is continuous) and
-- frun, fat, fsince (what this process found there at its first stamp).
-- ARGV[1] this process's run_id; ARGV[2] its uptime_in_seconds as the
-- client read it ('' if unknown); ARGV[3] '1' if it persists every write;
-- ARGV[4] '1' if this client stamped this process before; ARGV[5] the
-- longest gap between the last stamp of the process before and this
-- process's start that still counts as kept (ms); ARGV[6] the least time
-- between two writes of `at` (ms); ARGV[7] the process this client
-- stamped before this one ('' if none) and ARGV[8] the `at` of its last
-- stamp there that the node acknowledged ('' if none).
-- Returns {how long the dataset has been continuous, the mark's `at`} (ms).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- HGETALL, which the scripts' users may run already (operations.md §5d).
local flat = redis.call('HGETALL', KEYS[1])
local m = {}
for i = 1, #flat, 2 do
  m[flat[i]] = flat[i + 1]
end
local run, at, since = m.run or false, tonumber(m.at), tonumber(m.since)
local acked = tonumber(ARGV[8])
-- The evidence of a client that stamped the previous process: its last
-- acknowledged stamp is in the dataset this process took over.
local function vouched(before, before_at)
  return ARGV[3] == '1' and acked and before == ARGV[7] and before_at
    and before_at >= acked
end
if run == ARGV[1] and at and since then
  -- Stamped before in this process. A client that can vouch for the
  -- dataset found at its first stamp (a new client stamped first and
  -- could not) takes its continuity back.
  local fsince = tonumber(m.fsince)
  if ARGV[4] ~= '1' and fsince and fsince < since and vouched(m.frun, tonumber(m.fat)) then
    since = fsince
    redis.call('HSET', KEYS[1], 'since', since)
  end
  if now - at >= tonumber(ARGV[6]) then
    at = now
    redis.call('HSET', KEYS[1], 'at', at)
  end
  -- The `at` the mark holds: what a restart must keep for this client to
  -- vouch for it (not `now`, which a write skipped just now never stored).
  return {math.max(now - since, 0), at}
end
if ARGV[4] == '1' then
  -- This client stamped this process before and its mark is gone or
  -- replaced: the dataset was wiped or reloaded while it ran.
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'run', ARGV[1], 'at', now, 'since', now)
  return {0, now}
end
-- The first stamp of this process. The latest it can have started:
-- uptime_in_seconds is the clock's whole seconds less the start's, up to
-- a second over.
local started = math.min(now - (tonumber(ARGV[2]) or 0) * 1000 + 1000, now)
local kept = run and at and since and ARGV[3] == '1'
  and (at >= started - tonumber(ARGV[5]) or vouched(run, at))
redis.call('DEL', KEYS[1])
if run and at and since then
  redis.call('HSET', KEYS[1], 'frun', run, 'fat', at, 'fsince', since)
end
if not kept then
  -- No mark (a new or wiped dataset), a node that does not persist every
  -- write, or a mark older than the previous process's last writes (an
  -- old AOF or snapshot, persistence switched off at run time, a node down
  -- for a while that no one vouches for): whatever it held before its
  -- start may be lost.
  since = started
end
redis.call('HSET', KEYS[1], 'run', ARGV[1], 'at', now, 'since', since)
return {math.max(now - since, 0), now}
