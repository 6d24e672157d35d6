-- Keep a session×prize's keys while reservations are pending: push their expiry (and the
-- stock key's recorded 'exp', which the other scripts give the hashes they write) to ARGV[2].
-- A pending reservation is the only trace of an admitted grab whose event may never have
-- reached Kafka; the keys' TTL (session end + grace) must not delete it before the stale
-- job re-published it and the consumer settled it. Nothing is created: an absent key stays
-- absent, and a prize with nothing pending keeps its expiry.
-- KEYS: 1 meta, 2 users, 3 reserved, 4 outcomes, 5 returned, 6 fence, 7 revision, then
-- optionally more keys of the same slot kept with them (a stock bucket's transfers).
-- ARGV: 1 fence, 2 expire at (unix ms).
-- Returns 1 extended, 0 nothing pending or already kept that long, -1 not loaded,
-- -2 stale fence (a newer reconciler acted here).
if tonumber(ARGV[1]) < tonumber(redis.call('GET', KEYS[6]) or '0') then
  return -2
end
local exp = redis.call('HGET', KEYS[1], 'exp')
if not exp then
  return -1
end
if redis.call('HLEN', KEYS[3]) == 0 or tonumber(exp) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('HSET', KEYS[1], 'exp', ARGV[2])
for i = 1, #KEYS do
  redis.call('PEXPIREAT', KEYS[i], ARGV[2])
end
return 1
