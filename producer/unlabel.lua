-- ticketq: withdraw a ticket's correction (a wrong one), in one atomic step: the next train --from-redis
-- no longer learns it.
-- KEYS: 1 P:labels (a further question's: P:q:<NAME>:labels).
-- ARGV: 1 ticket id.
-- From a shell: redis-cli --eval unlabel.lua ticketq:labels , T-1
-- Atomic: the correction returned is the one deleted (a label.lua between a read and a delete cannot be
-- lost or misreported).
-- Cost: O(1): an HGET and an HDEL.
-- Returns the correction JSON it removed, or nil when the ticket had none.
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if raw then redis.call('HDEL', KEYS[1], ARGV[1]) end
return raw
