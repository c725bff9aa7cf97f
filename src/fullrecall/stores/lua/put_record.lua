-- Write one long-term record, compare-and-set on its version. KEYS: 1 the owner's records of its namespace,
-- 2 the user's record namespaces, 3 users. ARGV: 1 the record's field, 2 the record as a JSON object without
-- its version, 3 expected version ('' = any, 0 = none held), 4 namespace, 5 user segment, 6 ttl.
-- The version is the stored object's last member (a record stored before versions existed is at 1).
-- Returns the new version; error fullrecall:conflict <current version>.
local old = redis.call('HGET', KEYS[1], ARGV[1])
local version = 0
if old then version = tonumber(string.match(string.sub(old, -40), '"version": (%d+)}$') or 1) end
if ARGV[3] ~= '' and tonumber(ARGV[3]) ~= version then
  return redis.error_reply('fullrecall:conflict ' .. version)
end
redis.call('HSET', KEYS[1], ARGV[1], string.sub(ARGV[2], 1, -2) .. ', "version": ' .. (version + 1) .. '}')
redis.call('SADD', KEYS[2], ARGV[4])
redis.call('SADD', KEYS[3], ARGV[5])
local ttl = tonumber(ARGV[6])
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('EXPIRE', KEYS[2], ttl)
redis.call('EXPIRE', KEYS[3], ttl, 'NX')  -- a new set gets one,
redis.call('EXPIRE', KEYS[3], ttl, 'GT')  -- an index set is never shortened
return version + 1
