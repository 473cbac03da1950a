-- ticketq: keep the published head a worker has just loaded as the last good one (P:head:good), so a
-- worker that refuses a later publish (corrupt, made for another model) serves what the rest of the
-- fleet still serves, not its task's own head.
-- KEYS: 1 P:head, 2 P:head:good.
-- ARGV: 1 the version the worker loaded.
-- Atomic: the check that the version is still current and the copy of its bytes see one state.
-- Copies only while that version is still the current one (a publish since: the next load keeps it) and
-- not kept already, so of a fleet loading one head, one worker copies it. A key of another type than a
-- hash (by hand) is read as absent and P:head:good replaced: never an error in the worker's loop. Only
-- commands the worker's ACL grants (docs/threat-model.md; COPY since the twenty-third session).
-- Cost: O(1) plus one copy of the head's bytes per publish, inside the server (COPY: 39 MiB in about 20 ms
--   on a 2-core EPYC, where moving them through Lua as this script first did held Redis 155-170 ms). Where
--   COPY is refused (an ACL written before this script used it), the bytes go through Lua as before.
--   P:head:good then holds P:head's other fields too (at, sha256, by) and any TTL set on it by hand: its
--   readers read version and data by name, so this is harmless.
-- Returns 1 when copied.
local function field(key, name)
  local value = redis.pcall('HGET', key, name)
  if type(value) == 'table' and value.err then return false end
  return value
end
if field(KEYS[1], 'version') ~= ARGV[1] then return 0 end
if field(KEYS[2], 'version') == ARGV[1] then return 0 end
-- P:head is a hash here (its version was read): HEXISTS, not HGET, so the bytes are not read into Lua
if redis.call('HEXISTS', KEYS[1], 'data') == 0 then return 0 end
local copied = redis.pcall('COPY', KEYS[1], KEYS[2], 'REPLACE')
if type(copied) == 'table' and copied.err then
  local data = field(KEYS[1], 'data')
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[2], 'version', ARGV[1], 'data', data)
end
return 1
