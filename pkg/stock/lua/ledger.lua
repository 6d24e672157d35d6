-- Set a stock bucket's transfer counts ('sent', 'received') to what the transfers journal
-- says (docs/design.md), only if they are still what the reconciler read (ARGV 2, 3: no
-- take or give ran since) and no newer reconciler acted here (fence). A take or give lost
-- with Redis writes in a failover leaves them wrong: a lost give keeps the prize's in-flight
-- count above 0, so its gateways would answer 503 rebalancing instead of sold_out.
-- The journal's transfer ids are recorded too (HSETNX: a recorded one keeps its units), so
-- a give made again for one of them changes nothing.
-- KEYS: 1 meta, 2 fence, 3 transfers. ARGV: 1 fence, 2 sent read, 3 received read, 4 sent,
-- 5 received, then pairs of transfer id and units.
-- Returns 1 corrected, 0 moved, -1 absent, -2 stale fence.
local fence = tonumber(ARGV[1])
if fence < tonumber(redis.call('GET', KEYS[2]) or '0') then
  return -2
end
local m = redis.call('HMGET', KEYS[1], 'left', 'exp', 'sent', 'received')
if not m[1] then
  return -1
end
redis.call('SET', KEYS[2], ARGV[1], 'PXAT', m[2])
if tonumber(m[3] or '0') ~= tonumber(ARGV[2]) or tonumber(m[4] or '0') ~= tonumber(ARGV[3]) then
  return 0
end
redis.call('HSET', KEYS[1], 'sent', ARGV[4], 'received', ARGV[5])
if #ARGV > 5 then
  for i = 6, #ARGV, 2 do
    redis.call('HSETNX', KEYS[3], ARGV[i], ARGV[i + 1])
  end
  redis.call('PEXPIREAT', KEYS[3], m[2])
end
return 1
