-- Delete messages by id. ARGV: 8.. the ids. Returns how many were there.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local gone, summaries, text_bytes, index_bytes = 0, 0, 0, 0
for i = 8, #ARGV do
  local body = redis.call('HGET', KEYS[2], ARGV[i])
  if body then
    local s, t, x = sizes(body)
    summaries, text_bytes, index_bytes = summaries - s, text_bytes - t, index_bytes - x
  end
  gone = gone + redis.call('HDEL', KEYS[2], ARGV[i])
  redis.call('ZREM', KEYS[3], ARGV[i])
  redis.call('HDEL', KEYS[4], ARGV[i])
end
count(summaries, text_bytes, index_bytes)
if gone > 0 then
  redis.call('HINCRBY', KEYS[1], 'version', 1)
  new_epoch()
end
refresh()
return gone
