-- Shared by the write scripts (prepended to each by redis.py).
-- KEYS: 1 meta, 2 msgs, 3 order, 4 vecs, 5 state, 6 user's sessions, 7 users, 8 sessions with this id,
--       9 added (the log of additions since the last deletion: 'm'..id, 'v'..id; search caches load only these)
-- ARGV: 1 default ttl, 2 session base key, 3 user segment, 4 tenant, 5 user, 6 agent, 7 session, 8.. per script
local function register()
  if redis.call('EXISTS', KEYS[1]) == 0 then
    redis.call('HSET', KEYS[1], 'tenant', ARGV[4], 'user_id', ARGV[5], 'agent_id', ARGV[6],
               'session_id', ARGV[7], 'next', 0, 'version', 0, 'born', table.concat(redis.call('TIME'), '.'),
               'counted', 1, 'summary_count', 0, 'text_bytes', 0, 'index_bytes', 0)
  end
  redis.call('SADD', KEYS[6], ARGV[2])
  redis.call('SADD', KEYS[7], ARGV[3])
  redis.call('SADD', KEYS[8], ARGV[2])
end
-- the session's counters (stats): kept by every write once 'counted' is set (sessions made before
-- counters existed get them from the recount script first)
local function count(summaries, text_bytes, index_bytes)
  if redis.call('HEXISTS', KEYS[1], 'counted') == 1 then
    redis.call('HINCRBY', KEYS[1], 'summary_count', summaries)
    redis.call('HINCRBY', KEYS[1], 'text_bytes', text_bytes)
    redis.call('HINCRBY', KEYS[1], 'index_bytes', index_bytes)
  end
end
local function sizes(body)  -- what a stored message added to the counters
  local row = cjson.decode(body)
  local summary = row['kind'] == 'summary' and 1 or 0
  return summary, row['nbytes'] or (#row['text'] + #row['data']), row['ibytes'] or #row['text']
end
-- a deletion or an overwrite: every search cache of the session is rebuilt, the log starts again
local function new_epoch()
  redis.call('HINCRBY', KEYS[1], 'epoch', 1)
  redis.call('DEL', KEYS[9])
end
-- delete the messages ARGV[first..last] (their vectors too); how many were there
local function remove(first, last)
  local gone, summaries, text_bytes, index_bytes = 0, 0, 0, 0
  for i = first, last do
    local body = redis.call('HGET', KEYS[2], ARGV[i])
    if body then
      local s, t, x = sizes(body)
      summaries, text_bytes, index_bytes = summaries - s, text_bytes - t, index_bytes - x
    end
    gone = gone + redis.call('HDEL', KEYS[2], ARGV[i])
    redis.call('ZREM', KEYS[3], ARGV[i])
    redis.call('HDEL', KEYS[4], ARGV[i])
  end
  count(summaries, text_bytes, index_bytes)
  if gone > 0 then
    redis.call('HINCRBY', KEYS[1], 'version', 1)
    new_epoch()
  end
  return gone
end
local function refresh()
  local ttl = tonumber(redis.call('HGET', KEYS[1], 'ttl') or ARGV[1])
  for i = 1, 5 do redis.call('EXPIRE', KEYS[i], ttl) end
  redis.call('EXPIRE', KEYS[9], ttl)
  for i = 6, 8 do
    if redis.call('TTL', KEYS[i]) < ttl then redis.call('EXPIRE', KEYS[i], ttl) end
  end
end
