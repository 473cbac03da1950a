"""The queue's Lua scripts, kept apart from the Python that calls them (see :mod:`worker.queue`).

Each runs atomically on the server. Every key arrives in ``KEYS`` (never built inside a script), so the
scripts run on Redis Cluster when the prefix carries a hash tag. They need Redis 6.2+ (LMOVE).
"""

CLAIM = """
-- KEYS: 1 tickets, 2 inflight, 3 attempts, 4 workers.
-- ARGV: 1 most to move, 2 payloads this claim already holds, 3 worker id, 4 byte budget, 5 bytes held,
--       6 '1': the caller holds nothing, so what its list holds is stale.
-- Register in the same step as the move: a peer may have taken this worker for dead (its heartbeat
-- lapsed during an outage) and deregistered it; recovery only looks at registered workers.
-- Returns {stopped, payloads moved, stale payloads handed back}.
redis.call('SADD', KEYS[4], ARGV[3])
local moved = {}
local limit, held = tonumber(ARGV[1]), tonumber(ARGV[2])
-- The service starts each claim holding nothing, so anything already in its list is stale: an ack lost
-- in a Redis Cluster failover (the promoted replica never saw it). Hand it back, oldest served next.
local stale = 0
if held == 0 and ARGV[6] == '1' then
  while redis.call('LMOVE', KEYS[2], KEYS[1], 'LEFT', 'RIGHT') do stale = stale + 1 end
end
local budget, bytes = tonumber(ARGV[4]), tonumber(ARGV[5])
while #moved < limit do
  local p = redis.call('LINDEX', KEYS[1], -1)
  if not p then return {0, moved, stale} end
  if redis.call('HEXISTS', KEYS[3], redis.sha1hex(p)) == 1 then
    -- a suspect (in flight when a worker died) travels alone, after what was already claimed
    if #moved == 0 and held == 0 then
      redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
      return {1, {p}, stale}
    end
    return {1, moved, stale}
  end
  -- the byte budget bounds a worker's memory whatever producers push: a payload that would overflow
  -- it waits for the next claim (one larger than the whole budget is claimed alone)
  if bytes + #p > budget and (#moved > 0 or held > 0) then return {1, moved, stale} end
  redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
  moved[#moved + 1] = p
  bytes = bytes + #p
end
return {0, moved, stale}
"""

RECOVER = """
-- KEYS: 1 workers, 2 heartbeat, 3 inflight, 4 tickets, 5 attempts, 6 dead
-- ARGV: 1 worker id, 2 max attempts, 3 force (ignore a live heartbeat), then for each payload the caller
--       read from the in-flight list (left to right): payload, digest, attempts it read, dead letter JSON.
-- The caller builds the dead letters (the format lives in Python); this script re-checks what it read.
if ARGV[3] ~= '1' and redis.call('EXISTS', KEYS[2]) == 1 then return {'alive', 0, 0} end
local held = redis.call('LRANGE', KEYS[3], 0, -1)
if #held * 4 ~= #ARGV - 3 then return {'changed', 0, 0} end
for i, p in ipairs(held) do
  local j = 3 + (i - 1) * 4
  if p ~= ARGV[j + 1] or (redis.call('HGET', KEYS[5], ARGV[j + 2]) or '0') ~= ARGV[j + 3] then
    return {'changed', 0, 0}
  end
end
local requeued, dead = 0, 0
for i, p in ipairs(held) do
  local j = 3 + (i - 1) * 4
  if redis.call('HINCRBY', KEYS[5], ARGV[j + 2], 1) >= tonumber(ARGV[2]) then
    redis.call('LPUSH', KEYS[6], ARGV[j + 4])
    redis.call('HDEL', KEYS[5], ARGV[j + 2])
    dead = dead + 1
  else
    -- newest first onto the right end, so the oldest claim ends up rightmost: served next
    redis.call('RPUSH', KEYS[4], p)
    requeued = requeued + 1
  end
end
redis.call('DEL', KEYS[3])
if ARGV[3] ~= '1' then redis.call('SREM', KEYS[1], ARGV[1]) end
return {'ok', requeued, dead}
"""

REQUEUE_OWN = """
-- KEYS: 1 inflight, 2 tickets, 3 heartbeat, 4 workers.  ARGV: 1 worker id, 2 leave ('1': deregister too)
local n = 0
while redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT') do n = n + 1 end
if ARGV[2] == '1' then
  redis.call('DEL', KEYS[3])
  redis.call('SREM', KEYS[4], ARGV[1])
end
return n
"""

TRIM = """
-- KEYS: 1 done, 2 results, 3 dead, 4 review.  ARGV: 1 cutoff (unix seconds; '' keeps results), 2 most
-- results to delete, 3 dead letters to keep (0: all).  Redis 6.2 has no per-field hash TTL (HEXPIRE is
-- 7.4), so P:done orders result ids by finish time and this deletes the oldest, a bounded number per call.
local n = 0
if ARGV[1] ~= '' then
  local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
  n = #ids
  if n > 0 then
    redis.call('HDEL', KEYS[2], unpack(ids))
    redis.call('ZREM', KEYS[1], unpack(ids))
    redis.call('ZREM', KEYS[4], unpack(ids))  -- a trimmed result is no longer there to review
  end
end
local keep = tonumber(ARGV[3])
if keep > 0 then redis.call('LTRIM', KEYS[3], 0, keep - 1) end
return n
"""
