-- KEYS: 1 meta, 2 msgs, 3 vecs, 4 added; ARGV: 1 how much of the log a cache holds. Returns the session's
-- version, birth, epoch, and each later log entry with its message body or vector (false if gone since).
local out = {redis.call('HGET', KEYS[1], 'version') or '0', redis.call('HGET', KEYS[1], 'born') or '',
             redis.call('HGET', KEYS[1], 'epoch') or '0'}
for _, entry in ipairs(redis.call('LRANGE', KEYS[4], tonumber(ARGV[1]), -1)) do
  local id = string.sub(entry, 2)
  out[#out + 1] = entry
  out[#out + 1] = redis.call('HGET', string.sub(entry, 1, 1) == 'm' and KEYS[2] or KEYS[3], id)
end
return out
