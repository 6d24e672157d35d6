-- Set a session×prize's left stock to ARGV[2] only if it is still ARGV[1] (nothing was
-- admitted since the reconciler read it) and no newer reconciler acted here (fence).
-- KEYS: 1 meta, 2 fence. ARGV: 1 from, 2 to, 3 fence.
-- Returns 1 corrected, 0 moved, -1 absent, -2 stale fence.
local fence = tonumber(ARGV[3])
if fence < tonumber(redis.call('GET', KEYS[2]) or '0') then
  return -2
end
local meta = redis.call('HMGET', KEYS[1], 'left', 'exp')
if not meta[1] then
  return -1
end
redis.call('SET', KEYS[2], ARGV[3], 'PXAT', meta[2])
if meta[1] ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'left', ARGV[2])
return 1
