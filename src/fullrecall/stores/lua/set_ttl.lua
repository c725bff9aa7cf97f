-- Set the session's time to live. ARGV: 8 seconds.
register()
redis.call('HSET', KEYS[1], 'ttl', ARGV[8])
for i = 1, 5 do redis.call('EXPIRE', KEYS[i], tonumber(ARGV[8])) end
refresh()
return 1
