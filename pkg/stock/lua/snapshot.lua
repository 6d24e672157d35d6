-- One session×prize's counters for reconciliation, atomically and in O(1): a script blocks
-- every other client (admission included), so it never walks the reservation hash, which
-- grows with every grab while Kafka is down. The reservations themselves are listed
-- outside Lua with HSCAN, in pages. KEYS: 1 meta, 2 reserved, 3 returned.
-- Returns {left or false, total or false, number of pending reservations, number of
-- cancelled orders' units given back}.
local m = redis.call('HMGET', KEYS[1], 'left', 'total')
return {m[1], m[2], redis.call('HLEN', KEYS[2]), redis.call('HLEN', KEYS[3])}
