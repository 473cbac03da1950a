-- ticketq: claim, the move of up to N payloads from the input into this worker's in-flight list.
-- KEYS: 1 P:tickets, 2 P:inflight:<worker>, 3 P:attempts, 4 P:workers.
-- ARGV: 1 most to move, 2 payloads this claim already holds, 3 worker id, 4 byte budget, 5 bytes held,
--       6 '1': the caller holds nothing, so what its list holds is stale,
--       7 digest bound (DIGEST_BYTES in producer/protocol.py: a payload up to it is identified by its
--       sha1, a larger one by the sha1 of its first ARGV 7 bytes, a newline and its size in decimal),
--       8 bytes this call moves at most (CLAIM_CALL_BYTES: past it the call ends, 'capped', and the
--       caller calls again; at least one payload a call).
-- Atomic: the worker's registration and every move (and the hand-back of stale payloads) together, so a
-- payload is always in exactly one list and a registered worker's list is always found by recovery.
-- Cost: O(moved + stale) list operations and HEXISTSs plus one SHA1 of at most ARGV 7 bytes per payload
-- looked at; bounded by ARGV 1 (at most CLAIM_STEP, 500, in worker/queue.py: a larger drain takes
-- several calls) and by ARGV 8 in bytes: about 7 ms for 500 payloads of 200 bytes (2-core EPYC).
-- Each payload looked at is copied into Lua (LINDEX, LMOVE's reply) and out again (LPUSH, the reply):
-- O(its size), about 4 ms a MiB; a drain of 256 valid 64 KiB payloads in one call held Redis 60-150 ms,
-- hence ARGV 8. Only Redis's proto-max-bulk-len bounds one payload; set it to 1mb (docs/threat-model.md).
-- Returns {stopped, payloads moved, stale payloads handed back, capped (1: ARGV 8 ended the call)}.
redis.call('SADD', KEYS[4], ARGV[3])
local moved = {}
local limit, held = tonumber(ARGV[1]), tonumber(ARGV[2])
-- The service starts each claim holding nothing, so anything already in its list is stale: an ack lost
-- in a Redis Cluster failover (the promoted replica never saw it). Hand it back, oldest served next.
local stale, cap, spent = 0, tonumber(ARGV[8]), 0
if held == 0 and ARGV[6] == '1' then
  while true do
    local p = redis.call('LMOVE', KEYS[2], KEYS[1], 'LEFT', 'RIGHT')
    if not p then break end
    stale = stale + 1
    spent = spent + #p
    if spent >= cap then return {0, moved, stale, 1} end  -- the rest by the next call, still held == 0
  end
end
local budget, bytes, bound = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[7])
local function digest(p)
  if #p <= bound then return redis.sha1hex(p) end
  return redis.sha1hex(table.concat({string.sub(p, 1, bound), '\n', string.format('%d', #p)}))
end
-- the tail p (already read) into the in-flight list: LTRIM and LPUSH, not LMOVE, whose reply would copy
-- p into Lua a second time
local function move(p)
  redis.call('LTRIM', KEYS[1], 0, -2)
  redis.call('LPUSH', KEYS[2], p)
end
while #moved < limit do
  local p = redis.call('LINDEX', KEYS[1], -1)
  if not p then return {0, moved, stale, 0} end
  if redis.call('HEXISTS', KEYS[3], digest(p)) == 1 then
    -- a suspect (in flight when a worker died) travels alone, after what was already claimed
    if #moved == 0 and held == 0 then
      move(p)
      return {1, {p}, stale, 0}
    end
    return {1, moved, stale, 0}
  end
  -- the byte budget bounds a worker's memory whatever producers push: a payload that would overflow
  -- it waits for the next claim (one larger than the whole budget is claimed alone)
  if bytes + #p > budget and (#moved > 0 or held > 0) then return {1, moved, stale, 0} end
  -- this call's share: past ARGV 8 the payload waits for the caller's next call (not the next claim)
  if spent + #p > cap and (#moved > 0 or stale > 0) then return {0, moved, stale, 1} end
  move(p)
  moved[#moved + 1] = p
  bytes = bytes + #p
  spent = spent + #p
end
return {0, moved, stale, 0}
