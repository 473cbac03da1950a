-- ticketq: publish a head (a trained classifier head's file) as the current one, versioned.
-- KEYS: 1 P:head:seq, 2 P:head, 3 P:heads.
-- ARGV: 1 head bytes, 2 history entry JSON without its version, 3 entries of P:heads kept, 4 (optional)
--       the version it replaces ('' for none): when another is current, nothing changes (a head judged
--       against one version must not replace another published meanwhile).
-- Atomic: the new version, the current head and the history entry change together; a worker reading
--   P:head sees the old head or the new one whole.
-- Cost: O(1) plus copying the head's bytes (at most 64 MiB: a few ms a MiB) and the LTRIM.
-- Returns the new version, or {'changed', the current version}.
if ARGV[4] then
  local now = redis.call('HGET', KEYS[2], 'version') or ''
  if now ~= ARGV[4] then return {'changed', now} end
end
-- A key of the wrong type (by hand) fails here, before anything is written (a script is not rolled back).
redis.call('LLEN', KEYS[3])
local version = tostring(redis.call('INCR', KEYS[1]))
local entry = cjson.decode(ARGV[2])
entry.version = version
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'version', version, 'data', ARGV[1], 'at', tostring(entry.at),
  'sha256', entry.sha256, 'by', entry.by or '')
redis.call('LPUSH', KEYS[3], cjson.encode(entry))
redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[3]) - 1)
return version
