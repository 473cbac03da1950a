-- ticketq: publish a head (a trained classifier head's file) as the current one, versioned.
-- KEYS: 1 P:head:seq, 2 P:head, 3 P:heads, 4 (optional) a staging hash whose 'data' field holds the head's
--       bytes, written by the publisher just before (HSET with a TTL; Client.publish_head).
-- ARGV: 1 the head's bytes when there is no staging key ('' with one), 2 history entry JSON without its
--       version, 3 entries of P:heads kept, 4 (optional) the version it replaces ('' for none): when
--       another is current, nothing changes (a head judged against one version must not replace another
--       published meanwhile).
-- Atomic: the new version, the current head and the history entry change together; a worker reading
--   P:head sees the old head or the new one whole.
-- Cost: with a staging key O(1): it is renamed onto P:head (its bytes were copied by the publisher's HSET,
--   ~20 ms for 39 MB; through this script's arguments the same head held Redis 95-115 ms). Without one,
--   or where RENAME is refused (an ACL written before it), the bytes are copied here. Plus the LTRIM.
-- Returns the new version, {'changed', the current version}, or {'staged_gone'} when the staging key
--   is missing (expired: the publisher stalled past its TTL).
local staged = KEYS[4]
if ARGV[4] then
  local now = redis.call('HGET', KEYS[2], 'version') or ''
  if now ~= ARGV[4] then
    if staged then redis.call('DEL', staged) end  -- not left to its TTL: up to 64 MiB
    return {'changed', now}
  end
end
-- HEXISTS refused (an ACL line from before): the staging key is taken as there, as the caller wrote it
local ok, there = pcall(redis.call, 'HEXISTS', staged or '', 'data')
if staged and ok and there == 0 then return {'staged_gone'} end
-- A key of the wrong type (by hand) fails here, before anything is written (a script is not rolled back).
redis.call('LLEN', KEYS[3])
local version = tostring(redis.call('INCR', KEYS[1]))
local entry = cjson.decode(ARGV[2])
entry.version = version
local fields = {'version', version, 'at', tostring(entry.at), 'sha256', entry.sha256, 'by', entry.by or ''}
if staged then
  redis.call('HSET', staged, unpack(fields))
  -- RENAME keeps the staging key's TTL: PERSIST first. Either refused, the bytes are copied as before.
  if not (pcall(redis.call, 'PERSIST', staged) and pcall(redis.call, 'RENAME', staged, KEYS[2])) then
    redis.call('DEL', KEYS[2])
    redis.call('HSET', KEYS[2], 'data', redis.call('HGET', staged, 'data'), unpack(fields))
    redis.call('DEL', staged)
  end
else
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[2], 'data', ARGV[1], unpack(fields))
end
redis.call('LPUSH', KEYS[3], cjson.encode(entry))
redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[3]) - 1)
return version
