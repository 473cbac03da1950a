-- ticketq: recovery, one step of the requeue of a dead worker's in-flight list (or its poison letters).
-- KEYS: 1 P:workers, 2 P:heartbeat:<worker>, 3 P:inflight:<worker>, 4 P:tickets, 5 P:attempts, 6 P:dead,
--       7 P:recovering:<worker> (digest -> the attempt count this recovery gave it, so a copy of the
--       same payload in a later step, whoever takes that step, is the same death; gone with the list).
-- ARGV: 1 worker id, 2 max attempts, 3 force (ignore a live heartbeat), 4 digest bound (DIGEST_BYTES in
--       producer/protocol.py), then for each payload the caller read from the head of the in-flight list
--       (left to right; none: the list must be empty): payload (empty when it is over ARGV 4 bytes: its
--       digest identifies it), digest, its P:attempts value as read ('' for none) or '=N' when KEYS 7
--       holds N for it (an earlier step counted it), dead letter JSON ('' unless it dies now).
-- Atomic per step: the liveness check, the re-check of what the caller read, each requeue or dead letter,
--   the attempt counts and the LTRIM of those payloads (and, with the list emptied, the deregistration):
--   a payload ends in the input or in P:dead, never both or neither. The caller steps through a list by
--   the head, newest first, so the oldest claim still ends rightmost in the input: served next.
-- Cost: O(step) list and hash operations, plus one SHA1 of at most ARGV 4 bytes per payload over ARGV 4
--   bytes; the caller sends about 512 KiB of payloads and letters a step (RedisQueue.recover_worker): a
--   whole claim of 256 x 64 KiB in one call held Redis 140-200 ms.
-- The caller builds the dead letters (the format lives in Python); this script re-checks what it read.
-- P:attempts values are compared as the caller read them (ARGV: '' for none) and counted by attempts_of:
--   a value no worker wrote ('01', 'abc', '1e+20', 20 digits: by hand, or an older tool) counts as 0,
--   as it does in Python (worker.records.attempts_of), and is replaced, never an error half-way through.
-- Returns {'ok'|'alive'|'changed', requeued, dead, payloads left in the list}.
local function attempts_of(value)
  if value and #value <= 9 and string.match(value, '^%d+$') then return tonumber(value) end
  return 0
end
-- Alive: a heartbeat that expires, as every worker writes it (a key made by hand without a TTL, or of
-- another type, would keep its worker's claim from being recovered forever: not a heartbeat).
-- A worker whose ACL line predates +pttl +type judges by EXISTS, as before.
local function beating(key)
  local ttl = redis.pcall('PTTL', key)
  if type(ttl) == 'table' then return redis.call('EXISTS', key) == 1 end
  if ttl < 0 then return false end
  local kind = redis.pcall('TYPE', key)
  return kind['ok'] == nil or kind['ok'] == 'string'
end
if ARGV[3] ~= '1' and beating(KEYS[2]) then
  redis.call('DEL', KEYS[7])  -- it was only slow: a later death is a new one
  return {'alive', 0, 0, 0}
end
-- The keys it writes, each of the wrong type (by hand), fail here, before the first write: a script is
-- not rolled back, and a failure after some requeues would requeue them again at every retry.
redis.call('LLEN', KEYS[4])
redis.call('HEXISTS', KEYS[5], '')
redis.call('LLEN', KEYS[6])
redis.call('HEXISTS', KEYS[7], '')
local bound, most = tonumber(ARGV[4]), tonumber(ARGV[2])
local n = (#ARGV - 4) / 4
local held = {}
if n > 0 then held = redis.call('LRANGE', KEYS[3], 0, n - 1) end
if #held ~= n or (n == 0 and redis.call('LLEN', KEYS[3]) > 0) then return {'changed', 0, 0, 0} end
for i, p in ipairs(held) do
  local j = 4 + (i - 1) * 4
  local same
  if #p <= bound then
    same = p == ARGV[j + 1]
  else
    same = ARGV[j + 1] == '' and redis.sha1hex(table.concat({string.sub(p, 1, bound), '\n', string.format('%d', #p)})) == ARGV[j + 2]
  end
  local seen, mark = ARGV[j + 3], redis.call('HGET', KEYS[7], ARGV[j + 2])
  local now
  if string.sub(seen, 1, 1) == '=' then  -- counted by an earlier step: its mark must say so
    now = mark and string.format('=%s', mark) or ''
  elseif mark then  -- counted meanwhile by another recoverer's step
    return {'changed', 0, 0, 0}
  else
    now = redis.call('HGET', KEYS[5], ARGV[j + 2]) or ''
  end
  if not same or now ~= seen then return {'changed', 0, 0, 0} end
end
local requeued, dead = 0, 0
-- One death is one attempt of a payload, however many identical copies of it the worker held (a
-- producer's retry can push the same bytes twice): counted once per digest, and every copy then goes
-- the same way, each with the letter the caller built for it.
local attempts = {}
for i, p in ipairs(held) do
  local j = 4 + (i - 1) * 4
  local d, seen = ARGV[j + 2], ARGV[j + 3]
  if attempts[d] == nil then
    if string.sub(seen, 1, 1) == '=' then
      attempts[d] = tonumber(string.sub(seen, 2))
    else
      attempts[d] = attempts_of(redis.call('HGET', KEYS[5], d)) + 1
      redis.call('HSET', KEYS[5], d, string.format('%d', attempts[d]))
      redis.call('HSET', KEYS[7], d, string.format('%d', attempts[d]))
    end
  end
  if attempts[d] >= most then
    redis.call('LPUSH', KEYS[6], ARGV[j + 4])
    redis.call('HDEL', KEYS[5], d)
    dead = dead + 1
  else
    -- newest first onto the right end, so the oldest claim ends up rightmost: served next
    redis.call('RPUSH', KEYS[4], p)
    requeued = requeued + 1
  end
end
if n > 0 then redis.call('LTRIM', KEYS[3], n, -1) end
local left = redis.call('LLEN', KEYS[3])
if left == 0 then
  redis.call('DEL', KEYS[7])
  if ARGV[3] ~= '1' then redis.call('SREM', KEYS[1], ARGV[1]) end
end
return {'ok', requeued, dead, left}
