-- KEYS: 1 order, 2 msgs, 3 meta; ARGV: start, end of each span. Returns the session's birth (nothing if
-- there is no session), then id, position, body of each message in a span.
local born = redis.call('HGET', KEYS[3], 'born')
if not born then
  if redis.call('EXISTS', KEYS[3]) == 0 then return {} end
  born = ''  -- a session an earlier version made: its birth was not recorded
end
local out, seen = {born}, {}
for i = 1, #ARGV, 2 do
  local found = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[i], ARGV[i + 1], 'WITHSCORES')
  for j = 1, #found, 2 do
    local id = found[j]
    if not seen[id] then
      seen[id] = true
      local body = redis.call('HGET', KEYS[2], id)
      if body then
        out[#out + 1] = id
        out[#out + 1] = found[j + 1]
        out[#out + 1] = body
      end
    end
  end
end
return out
