-- A release is published on the channel named after the lock key, with
-- the token, to wake waiters (src/engine/wakeup.rs); where the lock was kept
-- for a waiter (line_hand_over), the token, a newline and whom it is kept
-- for, so that only they wake: sharded (SPUBLISH) where the
-- server has it, so that a Redis Cluster member's shard tells its own
-- subscribers and no other shard hears it; PUBLISH on servers without it
-- (their listeners subscribe to match, src/transport/pubsub.rs). pcall: a user not
-- allowed to publish still releases (the waiters poll).
local function notify(channel, message, kept)
  if type(kept) == 'string' then
    message = message .. '\n' .. kept
  end
  local sent = redis.pcall('SPUBLISH', channel, message)
  if type(sent) == 'table' and sent.err then
    redis.pcall('PUBLISH', channel, message)
  end
end
