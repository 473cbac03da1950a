-- ticketq: replay dead letters, one bounded chunk from the old end (the right) of P:dead per call.
-- KEYS: 1 P:dead, 2 P:tickets, 3 P:attempts.
-- ARGV: 1 reason prefix ('' any), 2 most letters to move this call, 3 ticket id ('' any),
--       4 letters already passed over at the old end (the caller's cursor, 0 at first),
--       5 most letters to look at this call, 6 most bytes of letters to read this call,
--       7 '1': poison letters too (by default a letter whose reason starts with "poison" stays dead).
-- Only letters whose payload is kept whole and is UTF-8 are replayed: as text ("payload"), or as base64
-- with "payload_utf8" (text whose JSON-escaped form was too long to keep as text; decoded here). Plain
-- base64 ones were not UTF-8 and truncated ones ("payload_bytes") were oversized: the worker would refuse
-- both again. A replayed letter that records the workers it killed ("attempts") gets that count back in
-- P:attempts: it travels alone, and is dead again after one more death rather than max-attempts more.
-- Atomic per call: each letter of the chunk is either still dead or back on P:tickets, never both or
--   neither; the caller loops, so a replay of many letters is many short steps (workers and producers run
--   between them), not one that blocks Redis.
-- Cost: letters are read one LINDEX at a time from the tail, and reading stops once ARGV 6 bytes were read
--   (the first letter is always read), so a call copies at most ARGV 6 bytes plus one letter (at most
--   ~96 KiB, MAX_LETTER_BYTES) into Lua, and decodes (cjson, base64) only those; one LSET per moved letter
--   (tombstone) and one LREM from the nearer end. ~1 ms for 100 letters of 500 bytes; ~4 ms for a budget of
--   1 MiB of letters of 87 KiB (the audit's r10b: 17 calls, none over 10 ms).
-- Returns {ids of the moved letters ('' when a letter has none), next cursor, 1 when the list is done}.
local reason, most, want_id = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local skip, look, budget = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local poison = ARGV[7] == '1'
local tomb = '\0ticketq:requeued\0'

local B64 = {}
do
  local abc = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'
  for i = 1, 64 do B64[string.byte(abc, i)] = i - 1 end
end

-- Standard base64 (with padding) to bytes; nil when it is not that.
local function unbase64(s)
  local n = #s
  if n % 4 ~= 0 then return nil end
  local parts, out = {}, {}
  for i = 1, n, 4 do
    local a, b, c, d = string.byte(s, i, i + 3)
    local va, vb = B64[a], B64[b]
    if va == nil or vb == nil then return nil end
    local last = i + 3 == n
    if c == 61 and d == 61 and last then  -- 'xx=='
      out[#out + 1] = string.char(math.floor((va * 4) + vb / 16) % 256)
    else
      local vc = B64[c]
      if vc == nil then return nil end
      if d == 61 and last then  -- 'xxx='
        local v = va * 4096 + vb * 64 + vc
        out[#out + 1] = string.char(math.floor(v / 1024), math.floor(v / 4) % 256)
      else
        local vd = B64[d]
        if vd == nil then return nil end
        local v = va * 262144 + vb * 4096 + vc * 64 + vd
        out[#out + 1] = string.char(math.floor(v / 65536), math.floor(v / 256) % 256, v % 256)
      end
    end
    if #out == 2048 then
      parts[#parts + 1] = table.concat(out)
      out = {}
    end
  end
  parts[#parts + 1] = table.concat(out)
  return table.concat(parts)
end

-- The payload to replay, or nil when the letter's payload is not kept whole as UTF-8.
local function replayable(letter)
  if letter.payload_bytes ~= nil then return nil end
  if type(letter.payload) == 'string' then return letter.payload end
  if letter.payload_utf8 == true and type(letter.payload_b64) == 'string' then
    return unbase64(letter.payload_b64)
  end
  return nil
end

-- The keys it writes, each of the wrong type (by hand), fail here, before a letter is overwritten by its
-- tombstone: a script is not rolled back, and the letter would be gone with its payload nowhere.
redis.call('LLEN', KEYS[2])
redis.call('HEXISTS', KEYS[3], '')
local len = redis.call('LLEN', KEYS[1])
if skip >= len then return {{}, skip, 1} end
local ids, moved, looked, bytes = {}, 0, 0, 0
local reached_head = false
while looked < look and moved < most and bytes < budget do
  local at = -(skip + looked + 1)  -- position from the tail: the oldest not yet looked at
  if skip + looked >= len then
    reached_head = true
    break
  end
  local raw = redis.call('LINDEX', KEYS[1], at)
  looked = looked + 1
  bytes = bytes + #raw
  local ok, letter = pcall(cjson.decode, raw)
  if ok and type(letter) == 'table' then
    local why = type(letter.reason) == 'string' and letter.reason or ''
    if (reason == '' or string.sub(why, 1, #reason) == reason)
      and (poison or string.sub(why, 1, 6) ~= 'poison')
      and (want_id == '' or letter.id == want_id) then
      local payload = replayable(letter)
      if payload ~= nil then
        redis.call('LSET', KEYS[1], at, tomb)
        redis.call('LPUSH', KEYS[2], payload)
        -- a count as workers write it (digits, as worker/recover.lua reads it), never '1e+20'
        if type(letter.attempts) == 'number' and letter.attempts >= 1 and letter.attempts < 1e9 then
          redis.call('HSET', KEYS[3], redis.sha1hex(payload), string.format('%d', math.floor(letter.attempts)))
        end
        moved = moved + 1
        ids[#ids + 1] = type(letter.id) == 'string' and letter.id or ''
      end
    end
  end
end
-- The tombstones lie between skip and skip + looked from the tail: LREM walks from the nearer end (from
-- the tail only, a replay deep in a list of 100,000 letters walked all of them: 20 ms a call).
if moved > 0 then
  local from_head = (skip + looked) * 2 > len
  redis.call('LREM', KEYS[1], from_head and moved or -moved, tomb)
end
local next_skip = skip + looked - moved
local done = (reached_head or skip + looked >= len) and 1 or 0
return {ids, next_skip, done}
