-- ticketq: record the right label of a ticket a worker has seen (P:labels), in one atomic step.
-- KEYS: 1 P:results, 2 P:text:<id>, 3 P:labels (a further question's: P:q:<NAME>:labels),
--   4 (optional) the asked question's label set: P:labelset, or question NAME's P:q:<NAME>:labelset,
--   5 (optional) P:review, or the question's P:q:<NAME>:review (a ticket labelled for a question leaves
--   that question's review queue, confirmed or corrected),
--   6 P:questions (the task's further questions; needed with ARGV 4).
-- ARGV: 1 ticket id, 2 label, 3 by (optional), 4 question NAME (optional).
-- From a shell: redis-cli --eval label.lua ticketq:results ticketq:text:T-1 ticketq:labels ticketq:labelset ticketq:review , T-1 billing alice
--   for question intent: redis-cli --eval label.lua ticketq:results ticketq:text:T-1 ticketq:q:intent:labels
--   ticketq:q:intent:labelset ticketq:q:intent:review ticketq:questions , T-1 lost_card alice intent
-- The label must be one of the task's: KEYS 4 (written by every worker at start) when it exists, else the
-- labels of the ticket's result (a further question's: of its answer NAME) while the result is kept; so a
-- result that was trimmed no longer lets any label through. (Not the result's labels when KEYS 4 exists:
-- a worker run with --result-scores N writes only the N most probable.) A further question must be one of
-- P:questions (written with the label sets at start) and have its label set: there may be no answer to
-- check by (no head for it yet), so an unknown question, or any question before a worker published them,
-- is refused.
-- Atomic: the checks and the write see one state; nothing is written when a check fails.
-- Cost: O(log n): a GET, an HGET, two SISMEMBERs, a ZREM, one cjson decode of a result and one encode
--   (and, for an error's list, SMEMBERS of a label set or P:questions of at most 200 members).
-- Returns the correction JSON it stored; errors start with TICKETQ (nothing is written then).
local id, label, by, question = ARGV[1], ARGV[2], ARGV[3] or '', ARGV[4] or ''
if not id or id == '' then return redis.error_reply('TICKETQ empty ticket id') end
if not label or label:match('^%s*$') then return redis.error_reply('TICKETQ empty label') end
if #label > 128 then return redis.error_reply('TICKETQ label too long: over 128 bytes') end
if label:find('%c') then return redis.error_reply('TICKETQ control character in label') end
if #by > 256 then return redis.error_reply('TICKETQ by too long: over 256 bytes') end
if by:find('%c') then return redis.error_reply('TICKETQ control character in by') end
local text = redis.call('GET', KEYS[2])
local raw = redis.call('HGET', KEYS[1], id)
if not text then
  if raw then return redis.error_reply('TICKETQ no text kept for ticket ' .. id .. ' (expired or not kept)') end
  return redis.error_reply('TICKETQ unknown ticket ' .. id .. ' (no result and no text)')
end
local record = {label = label, text = text}
-- An error lists a set up to 200 members (LISTED in producer/client.py, which lists P:questions the
-- same way; a taxonomy of 77 intents: all of them); a set grown past that (by hand: 200,000 labels held
-- Redis 364 ms here, sorted and joined in Lua) is named, not listed.
local function listed(key)
  local n = redis.pcall('SCARD', key)  -- a user refused SCARD (a line from before it): whole, as before
  if type(n) == 'number' and n > 200 then return n .. ' of them, too many to list here: SMEMBERS ' .. key end
  local known = redis.call('SMEMBERS', key)
  table.sort(known)
  return table.concat(known, ', ')
end
if question ~= '' then
  if not KEYS[6] or not KEYS[4] then
    return redis.error_reply('TICKETQ a question needs KEYS 4 P:q:<NAME>:labelset and 6 P:questions')
  end
  if redis.call('SISMEMBER', KEYS[6], question) == 0 or redis.call('EXISTS', KEYS[4]) == 0 then
    local known = listed(KEYS[6])
    if known == '' then known = 'none published: workers publish their task\'s questions at start' end
    return redis.error_reply('TICKETQ unknown question ' .. question .. ' (questions: ' .. known .. ')')
  end
end
local published = KEYS[4] and redis.call('EXISTS', KEYS[4]) == 1
if published and redis.call('SISMEMBER', KEYS[4], label) == 0 then
  local whose = question == '' and '' or (' for question ' .. question)
  return redis.error_reply('TICKETQ unknown label ' .. label .. whose .. ' (labels: ' .. listed(KEYS[4]) .. ')')
end
if raw then
  local ok, result = pcall(cjson.decode, raw)
  if ok and type(result) == 'table' and question ~= '' then
    -- a further question: its answer (absent when no head answered it yet: nothing to check against)
    result = type(result.answers) == 'table' and result.answers[question] or {}
    if type(result) ~= 'table' then result = {} end
  end
  if ok and type(result) == 'table' then
    -- only without a published label set: a result may carry its most probable labels only (--result-scores)
    if not published and type(result.scores) == 'table' and next(result.scores) ~= nil
        and result.scores[label] == nil then
      local known = {}
      for name in pairs(result.scores) do known[#known + 1] = name end
      table.sort(known)
      return redis.error_reply('TICKETQ unknown label ' .. label .. ' (labels: ' .. table.concat(known, ', ') .. ')')
    end
    if type(result.label) == 'string' then record.was = result.label end
  end
end
local now = redis.call('TIME')
record.at = tonumber(now[1]) + math.floor(tonumber(now[2]) / 1000) / 1000
if by ~= '' then record.by = by end
local out = cjson.encode(record)
-- A key of the wrong type (by hand) fails its first command, before anything is written: a script is not
-- rolled back, so nothing may be written before the last command that can fail.
redis.call('HEXISTS', KEYS[3], id)
if KEYS[5] then redis.call('ZREM', KEYS[5], id) end
redis.call('HSET', KEYS[3], id, out)
return out
