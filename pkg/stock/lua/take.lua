-- Step 2 of a bucket transfer (docs/buckets.md): the source bucket gives up units, before
-- MySQL moves them, so Redis's left of a bucket never exceeds its MySQL row's.
-- KEYS: 1 meta, 2 fence, 3 transfers (hash: transfer id -> units taken or given here).
-- ARGV: 1 fence, 2 transfer id, 3 units asked for.
-- Takes min(asked, left) from left and total, adds it to the meta's 'sent' (units this
-- bucket sent that may still be on their way: the gateway's in-flight count) and records it
-- under the transfer id. A repeat returns what the first call took and changes nothing.
-- Returns the units taken (0 or more), -1 not loaded (nothing recorded), -2 stale fence.
local fence = tonumber(ARGV[1])
if fence < tonumber(redis.call('GET', KEYS[2]) or '0') then
  return -2
end
local m = redis.call('HMGET', KEYS[1], 'left', 'exp')
-- The fence is recorded even on a repeat: a holder that resumes a transfer its paused
-- predecessor had taken must still lock that predecessor out of this bucket.
if m[2] then
  redis.call('SET', KEYS[2], ARGV[1], 'PXAT', m[2])
end
local done = redis.call('HGET', KEYS[3], ARGV[2])
if done then
  return tonumber(done)
end
if not m[1] then
  return -1
end
local k = math.max(0, math.min(tonumber(ARGV[3]), tonumber(m[1])))
-- 0 - k, not -k: Lua's -0 reaches Redis as "-0", which HINCRBY refuses.
redis.call('HINCRBY', KEYS[1], 'left', 0 - k)
redis.call('HINCRBY', KEYS[1], 'total', 0 - k)
redis.call('HINCRBY', KEYS[1], 'sent', k)
redis.call('HSET', KEYS[3], ARGV[2], k)
redis.call('PEXPIREAT', KEYS[3], m[2])
return k
