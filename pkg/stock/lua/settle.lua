-- Record the outcomes of persisted grabs for status polling and clear their reservations.
-- KEYS: 1 meta, 2 users, 3 reserved, 4 outcomes. ARGV: groups of (request id, user id,
-- kind "s"|"r"|"c", order id, reason, or "order id|reason"). Idempotent: settling twice
-- records the same outcome. A cancelled outcome is final: a late settlement of the order as
-- created (a redelivered grab event, the reconciler's stale job) never turns it back.
-- Returns how many reservations were cleared.
local exp = redis.call('HGET', KEYS[1], 'exp')
local cleared = 0
for i = 1, #ARGV, 4 do
  local rid, uid, kind, detail = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local had = redis.call('HDEL', KEYS[3], rid)
  -- Without the stock key the session's keys are gone (expired or lost): writing an
  -- outcome would create a key without a TTL; polls fall back to MySQL instead.
  if exp then
    local cur = redis.call('HGET', KEYS[4], rid)
    if not (cur and string.find(cur, '^[^|]*|c|')) then
      redis.call('HSET', KEYS[4], rid, uid .. '|' .. kind .. '|' .. detail)
    end
  end
  -- The database found no stock for an admitted grab: the user got nothing, so the
  -- admission no longer counts against their per-user limit. (Redis stock is not given
  -- back: the database says there is none; the reconciler corrects Redis.)
  if had == 1 and kind == 'r' and detail == 'sold_out' then
    if redis.call('HINCRBY', KEYS[2], uid, -1) <= 0 then
      redis.call('HDEL', KEYS[2], uid)
    end
  end
  cleared = cleared + had
end
if exp then
  redis.call('PEXPIREAT', KEYS[4], exp)
end
return cleared
