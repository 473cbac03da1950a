-- ticketq: recovery, the requeue of a dead worker's in-flight list (or its poison letters).
-- KEYS: 1 P:workers, 2 P:heartbeat:<worker>, 3 P:inflight:<worker>, 4 P:tickets, 5 P:attempts, 6 P:dead.
-- ARGV: 1 worker id, 2 max attempts, 3 force (ignore a live heartbeat), 4 digest bound (DIGEST_BYTES in
--       producer/protocol.py), then for each payload the caller read from the in-flight list (left to
--       right): payload (empty when it is over ARGV 4 bytes: its digest identifies it), digest, its
--       P:attempts value as read ('' for none), dead letter JSON.
-- Atomic: the liveness check, the re-check of what the caller read, every requeue or dead letter, the
--   attempt counts and the deregistration: a payload ends in the input or in P:dead, never both or neither.
-- Cost: O(held) list and hash operations, plus one SHA1 of at most ARGV 4 bytes per payload over ARGV 4
--   bytes (a large payload is not sent back, only checked by its digest); held is one worker's claim (at
--   most --drain payloads). LRANGE and the requeue still copy each payload: O(its size), a memory copy.
-- The caller builds the dead letters (the format lives in Python); this script re-checks what it read.
-- P:attempts values are compared as the caller read them (ARGV: '' for none) and counted by attempts_of:
--   a value no worker wrote ('01', 'abc', '1e+20', 20 digits: by hand, or an older tool) counts as 0,
--   as it does in Python (worker.records.attempts_of), and is replaced, never an error half-way through.
-- Returns {'ok'|'alive'|'changed', requeued, dead}.
local function attempts_of(value)
  if value and #value <= 9 and string.match(value, '^%d+$') then return tonumber(value) end
  return 0
end
if ARGV[3] ~= '1' and redis.call('EXISTS', KEYS[2]) == 1 then return {'alive', 0, 0} end
-- The keys it writes, each of the wrong type (by hand), fail here, before the first write: a script is
-- not rolled back, and a failure after some requeues would requeue them again at every retry.
redis.call('LLEN', KEYS[4])
redis.call('HEXISTS', KEYS[5], '')
redis.call('LLEN', KEYS[6])
local bound = tonumber(ARGV[4])
local held = redis.call('LRANGE', KEYS[3], 0, -1)
if #held * 4 ~= #ARGV - 4 then return {'changed', 0, 0} end
for i, p in ipairs(held) do
  local j = 4 + (i - 1) * 4
  local same
  if #p <= bound then
    same = p == ARGV[j + 1]
  else
    same = ARGV[j + 1] == '' and redis.sha1hex(table.concat({string.sub(p, 1, bound), '\n', string.format('%d', #p)})) == ARGV[j + 2]
  end
  if not same or (redis.call('HGET', KEYS[5], ARGV[j + 2]) or '') ~= ARGV[j + 3] then
    return {'changed', 0, 0}
  end
end
local requeued, dead = 0, 0
-- One death is one attempt of a payload, however many identical copies of it the worker held (a
-- producer's retry can push the same bytes twice): counted once per digest, and every copy then goes
-- the same way, each with the letter the caller built for it.
local attempts = {}
for i, p in ipairs(held) do
  local j = 4 + (i - 1) * 4
  local d = ARGV[j + 2]
  if attempts[d] == nil then
    attempts[d] = attempts_of(redis.call('HGET', KEYS[5], d)) + 1
    redis.call('HSET', KEYS[5], d, string.format('%d', attempts[d]))
  end
  if attempts[d] >= tonumber(ARGV[2]) then
    redis.call('LPUSH', KEYS[6], ARGV[j + 4])
    redis.call('HDEL', KEYS[5], d)
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
