-- ticketq: a worker hands back what it holds (graceful stop, or a claim whose reply was lost).
-- KEYS: 1 P:inflight:<worker>, 2 P:tickets, 3 P:heartbeat:<worker>, 4 P:workers.
-- ARGV: 1 worker id, 2 leave ('1': deregister too, once the list is empty), 3 bytes this call moves at
--       most (at least one payload; the caller calls again while some are left).
-- Atomic per call: each payload moves back to the right end (served next); the deregistration comes
--   with the last move, so no peer recovers (and counts an attempt against) what was handed back: the
--   worker is alive, its heartbeat kept, between calls.
-- Cost: O(moved) LMOVEs, each payload copied into Lua by LMOVE's reply: a claim of 256 x 64 KiB in one
--   call held Redis 44.5 ms. Returns {moved, left}.
local n, spent, cap = 0, 0, tonumber(ARGV[3])
while spent < cap do
  local p = redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')
  if not p then break end
  n = n + 1
  spent = spent + #p
end
local left = redis.call('LLEN', KEYS[1])
if left == 0 and ARGV[2] == '1' then
  redis.call('DEL', KEYS[3])
  redis.call('SREM', KEYS[4], ARGV[1])
end
return {n, left}
