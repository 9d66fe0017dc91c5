-- Which commands this user may not run: ARGV is a list of commands, each
-- as its argument count then the command and its arguments (a lock key
-- where it takes one: `redis.acl_check_cmd` checks key patterns, and
-- Redis 7.0 crashes when handed a keyed command without its keys).
-- Returns the names of the commands denied: an empty list when every one
-- is allowed. Changes nothing; each connection runs it once, after the
-- handshake (docs/operations.md, permissions).
local denied = {}
local i = 1
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  local command = {}
  for k = 1, n do
    command[k] = ARGV[i + k]
  end
  if not redis.acl_check_cmd(unpack(command)) then
    denied[#denied + 1] = command[1]
  end
  i = i + n + 1
end
return denied
