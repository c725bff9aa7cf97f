-- Delete one long-term record if it is at the expected version. KEYS: 1 the owner's records of its namespace.
-- ARGV: 1 the record's field, 2 the expected version (as put_record.lua reads it). Returns 1 if it went, else 0.
local old = redis.call('HGET', KEYS[1], ARGV[1])
if not old then return 0 end
local version = tonumber(string.match(string.sub(old, -40), '"version": (%d+)}$') or 1)
if version ~= tonumber(ARGV[2]) then return 0 end
return redis.call('HDEL', KEYS[1], ARGV[1])
