-- KEYS: 1 meta, 2 msgs, 3 vecs, 4 added, 5 order; ARGV: 1 how much of the log a cache holds. Returns the
-- session's version, birth, epoch, and for each later log entry: the entry, its message body or vector (false
-- if gone since), and the message's position (false for a vector, or if gone since).
local out = {redis.call('HGET', KEYS[1], 'version') or '0', redis.call('HGET', KEYS[1], 'born') or '',
             redis.call('HGET', KEYS[1], 'epoch') or '0'}
for _, entry in ipairs(redis.call('LRANGE', KEYS[4], tonumber(ARGV[1]), -1)) do
  local id = string.sub(entry, 2)
  local message = string.sub(entry, 1, 1) == 'm'
  out[#out + 1] = entry
  out[#out + 1] = redis.call('HGET', message and KEYS[2] or KEYS[3], id)
  out[#out + 1] = message and redis.call('ZSCORE', KEYS[5], id)
end
return out
