-- Which of the commands named in ARGV this user may not run: an empty
-- list when every one is allowed. Changes nothing; each connection runs it
-- once, after the handshake (docs/operations.md, permissions).
local denied = {}
for _, command in ipairs(ARGV) do
  if not redis.acl_check_cmd(command) then
    denied[#denied + 1] = command
  end
end
return denied
