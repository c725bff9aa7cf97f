-- Append a batch of messages (idempotent by id), after deleting others, in one atomic step. ARGV: 8 how many
-- ids to delete first, then those ids; then the count of messages, then per message: id, position ('' = next),
-- body (a JSON object; the script puts the message's serial first in it), is-summary, text bytes, index bytes.
-- Returns each message's position, in input order, then the numbers (from 1) of the messages whose id the session
-- held before. Everything is checked before anything is written (a script's writes are not undone by its error).
local d = tonumber(ARGV[8])
local doomed = {}
for i = 9, 8 + d do doomed[ARGV[i]] = true end
local nxt = tonumber(redis.call('HGET', KEYS[1], 'next') or 0)
local n = tonumber(ARGV[9 + d])
local out, seen, taken, new, held = {}, {}, {}, {}, {}
local summaries, text_bytes, index_bytes = 0, 0, 0
for i = 1, n do
  local at = 9 + d + 6 * (i - 1)
  local id, pos, body = ARGV[at + 1], ARGV[at + 2], ARGV[at + 3]
  local p = seen[id]
  if not p and not doomed[id] then
    p = redis.call('ZSCORE', KEYS[3], id)
    if p then held[#held + 1] = i end
  end
  if p then
    out[i] = tonumber(p)
  else
    if pos == '' then
      p = nxt
      if p > 9007199254740991 then  -- past the last position (2**53 - 1): doubles tell no position from the next
        return redis.error_reply('fullrecall:past ' .. i)
      end
    else
      p = tonumber(pos)
      local held = redis.call('ZRANGEBYSCORE', KEYS[3], p, p, 'LIMIT', 0, 1)
      if taken[p] or (#held > 0 and not doomed[held[1]]) then
        return redis.error_reply('fullrecall:position ' .. p)
      end
    end
    if p + 1 > nxt then nxt = p + 1 end
    seen[id], taken[p], out[i] = p, true, p
    new[#new + 1] = {id, p, body}
    summaries = summaries + tonumber(ARGV[at + 4])
    text_bytes = text_bytes + tonumber(ARGV[at + 5])
    index_bytes = index_bytes + tonumber(ARGV[at + 6])
  end
end
register()  -- only once it writes: a refused batch leaves no session behind
if d > 0 then remove(9, 8 + d) end
for _, m in ipairs(new) do  -- each body gets the session's next serial, its key's part (keys are never reused)
  local serial = redis.call('HINCRBY', KEYS[1], 'serial', 1)
  redis.call('HSET', KEYS[2], m[1], '{"serial":' .. serial .. ',' .. string.sub(m[3], 2))
  redis.call('ZADD', KEYS[3], m[2], m[1])
  redis.call('RPUSH', KEYS[9], 'm' .. m[1])
end
redis.call('HSET', KEYS[1], 'next', nxt)
if #new > 0 then
  redis.call('HINCRBY', KEYS[1], 'version', 1)
  count(summaries, text_bytes, index_bytes)
end
refresh()
return {out, held}
