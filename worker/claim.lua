-- ticketq: claim, the move of up to N payloads from the input into this worker's in-flight list.
-- KEYS: 1 P:tickets, 2 P:inflight:<worker>, 3 P:attempts, 4 P:workers.
-- ARGV: 1 most to move, 2 payloads this claim already holds, 3 worker id, 4 byte budget, 5 bytes held,
--       6 '1': the caller holds nothing, so what its list holds is stale.
-- Atomic: the worker's registration and every move (and the hand-back of stale payloads) together, so a
-- payload is always in exactly one list and a registered worker's list is always found by recovery.
-- Cost: O(moved + stale) LMOVEs and HEXISTSs plus one SHA1 per payload looked at; bounded by ARGV 1 and
-- the byte budget, so at most a few hundred payloads a call (well under a millisecond for small ones).
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
