-- ticketq: trim, the deletion of results past their keep time and of the oldest dead letters.
-- KEYS: 1 P:done, 2 P:results, 3 P:dead, 4 P:review (a trimmed result is no longer there to review),
--   5... P:q:<NAME>:review of each further question (optional).
-- ARGV: 1 cutoff (unix seconds; '' keeps results), 2 most results to delete, 3 dead letters to keep (0: all).
-- Redis 6.2 has no per-field hash TTL (HEXPIRE is 7.4), so P:done orders result ids by finish time and
-- this deletes the oldest, a bounded number per call.
-- Atomic: a result, its P:done entry and its review entries go together. Cost: O(ARGV 2 * log n) per review
--   queue plus the LTRIM's removals;
--   the worker calls it with 500 (1,000 took 5-10 ms on a loaded 2-core EPYC, most of it the HDEL and
--   ZREMs of that many members). Returns results deleted.
-- A review queue or P:dead of the wrong type (by hand) fails here, before anything is deleted (a script is not
-- rolled back): with the commands the worker's ACL grants, O(log n) each.
for k = 4, #KEYS do redis.call('ZRANGEBYSCORE', KEYS[k], '+inf', '+inf', 'LIMIT', 0, 1) end
redis.call('LLEN', KEYS[3])
local n = 0
if ARGV[1] ~= '' then
  local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
  n = #ids
  if n > 0 then
    redis.call('HDEL', KEYS[2], unpack(ids))
    redis.call('ZREM', KEYS[1], unpack(ids))
    for k = 4, #KEYS do redis.call('ZREM', KEYS[k], unpack(ids)) end
  end
end
local keep = tonumber(ARGV[3])
if keep > 0 then redis.call('LTRIM', KEYS[3], 0, keep - 1) end
return n
