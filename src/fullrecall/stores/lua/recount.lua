-- Give a session made before counters existed its counters (once). Returns 1 if it counted.
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], 'counted') == 1 then return 0 end
local summaries, text_bytes, index_bytes = 0, 0, 0
for _, body in ipairs(redis.call('HVALS', KEYS[2])) do
  local s, t, x = sizes(body)
  summaries, text_bytes, index_bytes = summaries + s, text_bytes + t, index_bytes + x
end
redis.call('HSET', KEYS[1], 'counted', 1, 'summary_count', summaries, 'text_bytes', text_bytes,
           'index_bytes', index_bytes)
return 1
