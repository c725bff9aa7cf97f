-- Delete messages by id. ARGV: 8.. the ids. Returns how many were there.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local gone = remove(8, #ARGV)
refresh()
return gone
