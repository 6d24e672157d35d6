-- An atomic view of one session×prize for reconciliation. KEYS: 1 meta, 2 reserved.
-- Returns {left or false, total, reserved hash as a flat list}.
local m = redis.call('HMGET', KEYS[1], 'left', 'total')
return {m[1], m[2], redis.call('HGETALL', KEYS[2])}
