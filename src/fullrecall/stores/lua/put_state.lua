-- Compare-and-set one state document. ARGV: 8 key, 9 JSON, 10 expected version ('' = any).
-- Returns the new version; error fullrecall:conflict <current version>.
local vf = ARGV[8] .. '\0v'  -- the document's version: a field no key can name (keys hold no NUL)
local version = tonumber(redis.call('HGET', KEYS[5], vf) or redis.call('HEXISTS', KEYS[5], ARGV[8]))
if ARGV[10] ~= '' and tonumber(ARGV[10]) ~= version then
  return redis.error_reply('fullrecall:conflict ' .. version)
end
register()  -- only once it writes: a refused write leaves no session behind
redis.call('HSET', KEYS[5], ARGV[8], ARGV[9], vf, version + 1)
refresh()
return version + 1
