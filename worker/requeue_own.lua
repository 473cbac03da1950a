-- ticketq: a worker hands back everything it holds (graceful stop, or a claim whose reply was lost).
-- KEYS: 1 P:inflight:<worker>, 2 P:tickets, 3 P:heartbeat:<worker>, 4 P:workers.
-- ARGV: 1 worker id, 2 leave ('1': deregister too).
-- Atomic: every payload moves back to the right end (served next) with the deregistration, so no peer
--   recovers (and counts an attempt against) what was handed back.
-- Cost: O(held) LMOVEs; held is one worker's claim. Returns how many moved.
local n = 0
while redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT') do n = n + 1 end
if ARGV[2] == '1' then
  redis.call('DEL', KEYS[3])
  redis.call('SREM', KEYS[4], ARGV[1])
end
return n
