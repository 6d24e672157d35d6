-- Change a preheated session×prize's total before it opens. KEYS: 1 meta, 2 reserved.
-- ARGV: 1 new total. Returns 1 changed, 0 not loaded (nothing to change), -1 refused because
-- grabs were already admitted (left ~= total or a reservation exists).
local m = redis.call('HMGET', KEYS[1], 'left', 'total')
if not m[1] then
  return 0
end
if tonumber(m[1]) ~= tonumber(m[2]) or redis.call('EXISTS', KEYS[2]) == 1 then
  return -1
end
redis.call('HSET', KEYS[1], 'left', ARGV[1], 'total', ARGV[1])
return 1
