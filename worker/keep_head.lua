-- ticketq: keep the published head a worker has just loaded as the last good one (P:head:good), so a
-- worker that refuses a later publish (corrupt, made for another model) serves what the rest of the
-- fleet still serves, not its task's own head.
-- KEYS: 1 P:head, 2 P:head:good.
-- ARGV: 1 the version the worker loaded.
-- Atomic: the check that the version is still current and the copy of its bytes see one state.
-- Copies only while that version is still the current one (a publish since: the next load keeps it) and
-- not kept already, so of a fleet loading one head, one worker copies it. A key of another type than a
-- hash (by hand) is read as absent and P:head:good replaced: never an error in the worker's loop. Only
-- commands the worker's ACL already grants (docs/threat-model.md).
-- Cost: O(1) plus copying the head's bytes once per publish (a few ms a MiB). Returns 1 when copied.
local function field(key, name)
  local value = redis.pcall('HGET', key, name)
  if type(value) == 'table' and value.err then return false end
  return value
end
if field(KEYS[1], 'version') ~= ARGV[1] then return 0 end
if field(KEYS[2], 'version') == ARGV[1] then return 0 end
local data = field(KEYS[1], 'data')
if not data then return 0 end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'version', ARGV[1], 'data', data)
return 1
