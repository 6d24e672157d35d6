-- Admission of one grab, atomically, in one round trip.
-- KEYS: 1 meta (hash: left, total, limit, exp, ver), 2 users (hash: user -> admitted count),
--       3 reserved (hash: request id -> "user|admitted_ms"), 4 outcomes (hash: request id ->
--       "user|s|order_id" or "user|r|reason"). All share one hash tag (one cluster slot).
-- ARGV: 1 request id, 2 user id, 3 now (unix ms).
-- Returns {code, left, detail}: 0 admitted, 1 seen before (detail = first verdict's state),
-- 2 limit, 3 sold out, 4 not loaded, 5 request id belongs to another user.
--
-- Order matters: the duplicate and per-user checks come before any deduction, so a retried
-- EVALSHA (go-redis retries a timed-out reply) or a repeat click never deducts twice.
local meta = redis.call('HMGET', KEYS[1], 'left', 'limit', 'exp')
if not meta[1] then
  -- Never create the key: a missing key means "not loaded", not "zero" or "-1".
  return {4, -1, ''}
end
local left = tonumber(meta[1])
local rid, uid = ARGV[1], ARGV[2]

local seen = redis.call('HGET', KEYS[3], rid)
local state = 'queued'
if not seen then
  seen = redis.call('HGET', KEYS[4], rid)
  state = 'settled'
end
if seen then
  local owner = string.match(seen, '^([^|]*)')
  if owner ~= uid then
    return {5, left, ''}
  end
  if state == 'settled' then
    state = string.sub(seen, #owner + 2)
  end
  return {1, left, state}
end

local n = tonumber(redis.call('HGET', KEYS[2], uid) or '0')
if n >= tonumber(meta[2]) then
  return {2, left, ''}
end
if left <= 0 then
  return {3, 0, ''}
end

left = redis.call('HINCRBY', KEYS[1], 'left', -1)
redis.call('HINCRBY', KEYS[2], uid, 1)
redis.call('HSET', KEYS[3], rid, uid .. '|' .. ARGV[3])
-- The hashes live exactly as long as the stock key (session end + grace), set at preheat.
redis.call('PEXPIREAT', KEYS[2], meta[3])
redis.call('PEXPIREAT', KEYS[3], meta[3])
return {0, left, ''}
