-- Set a session×prize's left stock to ARGV[2] only if it is still ARGV[1] (nothing was
-- admitted since the reconciler read it). KEYS: 1 meta. Returns 1 corrected, 0 moved, -1 absent.
local left = redis.call('HGET', KEYS[1], 'left')
if not left then
  return -1
end
if left ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'left', ARGV[2])
return 1
