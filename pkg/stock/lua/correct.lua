-- Set a session×prize's left stock to ARGV[2] only if it is still ARGV[1] and the number of
-- units given back is still ARGV[4] (nothing was admitted or returned since the reconciler
-- read them: a return and an admission in between leave left as it was, not the count) and
-- no newer reconciler acted here (fence).
-- KEYS: 1 meta, 2 fence, 3 returned. ARGV: 1 from, 2 to, 3 fence, 4 returned count.
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
if meta[1] ~= ARGV[1] or redis.call('HLEN', KEYS[3]) ~= tonumber(ARGV[4]) then
  return 0
end
redis.call('HSET', KEYS[1], 'left', ARGV[2])
return 1
