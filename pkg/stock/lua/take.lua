-- Step 2 of a bucket transfer (docs/design.md): the source bucket gives up units, before
-- MySQL moves them, so Redis's left of a bucket never exceeds its MySQL row's.
-- KEYS: 1 meta, 2 fence, 3 transfers (hash: transfer id -> units taken or given here);
--       a cut (stock adjustment, to outside the prize) adds 4 revision.
-- ARGV: 1 fence, 2 transfer id, 3 units asked for; a cut adds 4 'cut', 5 the lowest row
--       version a preheat may load from now on (the row's version before the cut, plus
--       one), 6 expire at (unix ms) for the fence and revision when not loaded.
-- Takes min(asked, left) from left and total, adds it to the meta's 'sent' (units this
-- bucket sent that may still be on their way: the gateway's in-flight count) and records it
-- under the transfer id. A cut adds it to 'received' too: its units go nowhere, so nothing
-- is in flight, and the two fields mark the key live (load.lua never overwrites it with a
-- row read before the cut's MySQL step). A repeat returns what the first call took and
-- changes nothing.
-- Returns the units taken (0 or more), -1 not loaded (nothing recorded; a cut records its
-- revision, so a preheat of the row before the cut is refused), -2 stale fence.
local fence = tonumber(ARGV[1])
if fence < tonumber(redis.call('GET', KEYS[2]) or '0') then
  return -2
end
local cut = ARGV[4] == 'cut'
local m = redis.call('HMGET', KEYS[1], 'left', 'exp')
-- The fence is recorded even on a repeat: a holder that resumes a transfer its paused
-- predecessor had taken must still lock that predecessor out of this bucket.
if m[2] then
  redis.call('SET', KEYS[2], ARGV[1], 'PXAT', m[2])
elseif cut then
  redis.call('SET', KEYS[2], ARGV[1], 'PXAT', ARGV[6])
end
local done = redis.call('HGET', KEYS[3], ARGV[2])
if done then
  return tonumber(done)
end
if not m[1] then
  if cut and tonumber(ARGV[5]) > tonumber(redis.call('GET', KEYS[4]) or '-1') then
    redis.call('SET', KEYS[4], ARGV[5], 'PXAT', ARGV[6])
  end
  return -1
end
local k = math.max(0, math.min(tonumber(ARGV[3]), tonumber(m[1])))
-- 0 - k, not -k: Lua's -0 reaches Redis as "-0", which HINCRBY refuses.
redis.call('HINCRBY', KEYS[1], 'left', 0 - k)
redis.call('HINCRBY', KEYS[1], 'total', 0 - k)
redis.call('HINCRBY', KEYS[1], 'sent', k)
if cut then
  redis.call('HINCRBY', KEYS[1], 'received', k)
end
redis.call('HSET', KEYS[3], ARGV[2], k)
redis.call('PEXPIREAT', KEYS[3], m[2])
return k
