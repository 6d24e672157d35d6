-- Give cancelled orders' units back, atomically and at most once per request id.
-- KEYS: 1 meta, 2 users, 3 reserved, 4 outcomes, 5 returned (hash: request id -> 1, the
--       units given back for resale). All share one hash tag (one cluster slot).
-- ARGV: groups of (request id, user id, order id, reason, resale "1"|"0", release "1"|"0").
-- For each: the reservation (if still pending) is settled, the outcome becomes
-- "user|c|order id|reason" (status polls say cancelled); with resale, and only the first
-- time (HSETNX on returned), left grows by one and, with release, the user's admitted count
-- goes down so they may grab again. A replay, a redelivery, or a return after a rebuild
-- that already counted the unit (it wrote the request id into returned) adds nothing.
-- Returns {returned, already, marked}, or {-1, 0, 0} when the stock key is absent: nothing is
-- written (never create a key; the reconciler's rebuild counts the unit from MySQL).
local exp = redis.call('HGET', KEYS[1], 'exp')
if not exp then
  return {-1, 0, 0}
end
local returned, already, marked = 0, 0, 0
for i = 1, #ARGV, 6 do
  local rid, uid, oid, reason, resale, release = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
  redis.call('HDEL', KEYS[3], rid)
  redis.call('HSET', KEYS[4], rid, uid .. '|c|' .. oid .. '|' .. reason)
  if resale == '1' then
    if redis.call('HSETNX', KEYS[5], rid, '1') == 1 then
      redis.call('HINCRBY', KEYS[1], 'left', 1)
      if release == '1' and redis.call('HINCRBY', KEYS[2], uid, -1) <= 0 then
        redis.call('HDEL', KEYS[2], uid)
      end
      returned = returned + 1
    else
      already = already + 1
    end
  else
    marked = marked + 1
  end
end
redis.call('PEXPIREAT', KEYS[4], exp)
redis.call('PEXPIREAT', KEYS[5], exp)
return {returned, already, marked}
