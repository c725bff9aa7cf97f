-- Store vectors for the messages the session holds; ids it does not hold (deleted or forgotten since they were
-- appended) are dropped. ARGV: 8 model, 9 dim, 10 count, then per message: id, vector bytes.
-- Returns how many were written. Errors: fullrecall:model [model, dim].
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local model, dim, n = ARGV[8], ARGV[9], tonumber(ARGV[10])
local cur = redis.call('HMGET', KEYS[1], 'vec_model', 'vec_dim')
if cur[1] and (cur[1] ~= model or cur[2] ~= dim) then
  return redis.error_reply('fullrecall:model ' .. cjson.encode({cur[1], tonumber(cur[2])}))
end
local held = {}
for i = 1, n do
  if redis.call('HEXISTS', KEYS[2], ARGV[9 + 2 * i]) == 1 then held[#held + 1] = i end
end
if #held == 0 then return 0 end
local overwrote = false
for _, i in ipairs(held) do
  if redis.call('HSET', KEYS[4], ARGV[9 + 2 * i], ARGV[10 + 2 * i]) == 0 then overwrote = true end
  redis.call('RPUSH', KEYS[9], 'v' .. ARGV[9 + 2 * i])
end
if overwrote then new_epoch() end
redis.call('HSET', KEYS[1], 'vec_model', model, 'vec_dim', dim)
redis.call('HINCRBY', KEYS[1], 'version', 1)
refresh()
return #held
