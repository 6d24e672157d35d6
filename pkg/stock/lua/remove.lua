-- Delete an ended session×prize's keys, unless reservations are still pending (admitted
-- grabs whose orders are not settled yet: deleting them would lose the only trace the
-- reconciler re-publishes from) or a newer reconciler acted here (fence). The fence key
-- itself stays until it expires.
-- KEYS: 1 meta, 2 users, 3 reserved, 4 outcomes, 5 fence, 6 returned, then optionally more
-- keys of the same slot deleted with them (a stock bucket's transfers, demand and wanted).
-- ARGV: 1 fence.
-- Returns 1 removed, -2 stale fence, -3 reservations pending.
if tonumber(ARGV[1]) < tonumber(redis.call('GET', KEYS[5]) or '0') then
  return -2
end
if redis.call('HLEN', KEYS[3]) > 0 then
  return -3
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6])
for i = 7, #KEYS do
  redis.call('DEL', KEYS[i])
end
return 1
