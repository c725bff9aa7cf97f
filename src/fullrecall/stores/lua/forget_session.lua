-- KEYS: 1 meta, 2 msgs, 3 order, 4 vecs, 5 state, 6 added (the session's families), 7 its owner's
-- sessions set, 8 the set of sessions with its id; ARGV: 1 the session's base key.
-- Counts what the session holds and deletes it in one step, so what is counted is what is deleted,
-- however many writers append meanwhile. Returns vectors, state documents, then each message body.
local out = {redis.call('HLEN', KEYS[4]), 0}
for _, field in ipairs(redis.call('HKEYS', KEYS[5])) do
  if not string.find(field, '\0', 1, true) then out[2] = out[2] + 1 end  -- documents, not their versions
end
for _, body in ipairs(redis.call('HVALS', KEYS[2])) do out[#out + 1] = body end
redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
redis.call('SREM', KEYS[7], ARGV[1])
redis.call('SREM', KEYS[8], ARGV[1])
return out
