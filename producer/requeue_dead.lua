-- ticketq: replay dead letters, one bounded chunk from the old end (the right) of P:dead per call.
-- KEYS: 1 P:dead, 2 P:tickets, 3 P:attempts.
-- ARGV: 1 reason prefix ('' any), 2 most letters to move this call, 3 ticket id ('' any),
--       4 letters already passed over at the old end (the caller's cursor, 0 at first),
--       5 most letters to look at this call, 6 most bytes of letters to decode this call,
--       7 '1': poison letters too (by default a letter whose reason starts with "poison" stays dead).
-- Only letters whose payload is kept whole as text are replayed (base64 ones were not UTF-8, truncated
-- ones were oversized: the worker would refuse both again). A replayed letter that records the workers it
-- killed ("attempts") gets that count back in P:attempts: it travels alone, and is dead again after one
-- more death rather than max-attempts more.
-- Atomic per call: each letter of the chunk is either still dead or back on P:tickets, never both or
--   neither; the caller loops, so a replay of many letters is many short steps (workers and producers run
--   between them), not one that blocks Redis.
-- Cost: one LRANGE of ARGV 5 letters at offset ARGV 4 from the tail, a cjson decode of at most ARGV 6
--   bytes, one LSET per moved letter (tombstone) and one LREM from the tail: O(ARGV 4 + ARGV 5) list
--   steps plus the decoding; ~1 ms for 100 letters of 500 bytes.
-- Returns {ids of the moved letters ('' when a letter has none), next cursor, 1 when the list is done}.
local reason, most, want_id = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local skip, look, budget = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local poison = ARGV[7] == '1'
local tomb = '\0ticketq:requeued\0'
local len = redis.call('LLEN', KEYS[1])
if skip >= len then return {{}, skip, 1} end
local chunk = redis.call('LRANGE', KEYS[1], -(skip + look), -(skip + 1))  -- newest first, oldest last
local ids, moved, looked, bytes = {}, 0, 0, 0
for i = #chunk, 1, -1 do  -- oldest first, so replays keep their original order
  if moved >= most or bytes >= budget then break end
  local raw = chunk[i]
  looked = looked + 1
  bytes = bytes + #raw
  local ok, letter = pcall(cjson.decode, raw)
  if ok and type(letter) == 'table' and type(letter.payload) == 'string' and letter.payload_bytes == nil then
    local why = type(letter.reason) == 'string' and letter.reason or ''
    if (reason == '' or string.sub(why, 1, #reason) == reason)
      and (poison or string.sub(why, 1, 6) ~= 'poison')
      and (want_id == '' or letter.id == want_id) then
      -- position from the tail: the oldest of the chunk is at -(skip + 1)
      redis.call('LSET', KEYS[1], -(skip + (#chunk - i) + 1), tomb)
      redis.call('LPUSH', KEYS[2], letter.payload)
      if type(letter.attempts) == 'number' and letter.attempts > 0 then
        redis.call('HSET', KEYS[3], redis.sha1hex(letter.payload), tostring(math.floor(letter.attempts)))
      end
      moved = moved + 1
      ids[#ids + 1] = type(letter.id) == 'string' and letter.id or ''
    end
  end
end
if moved > 0 then redis.call('LREM', KEYS[1], -moved, tomb) end
local next_skip = skip + looked - moved
local done = (looked == #chunk and #chunk < look) and 1 or 0
if next_skip >= len - moved then done = 1 end
return {ids, next_skip, done}
