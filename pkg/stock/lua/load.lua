-- Preheat one session×prize from a stock row read from MySQL. KEYS: 1 meta, 2 reserved,
-- 3 revision (the newest stock-row version an adjustment wrote to Redis).
-- ARGV: 1 left, 2 total, 3 per-user limit, 4 expire at (unix ms), 5 the row's version.
-- A stock bucket (docs/design.md) adds KEYS 4 transfers and ARGV 6 sent, 7 received, then
-- pairs (transfer id, units): its ledger of the transfers journal, written with the row.
-- Returns 1 loaded, 0 kept (the key is there), -1 stale (an adjustment newer than the row
-- this preheat read has reached Redis: read MySQL again).
local ver = tonumber(ARGV[5])
-- The adjustment writes its revision inside its MySQL transaction, before the commit, so
-- a preheat that read the old row can only arrive here after the revision: refused.
if ver < tonumber(redis.call('GET', KEYS[3]) or '-1') then
  return -1
end
local m = redis.call('HMGET', KEYS[1], 'left', 'total', 'ver', 'sent', 'received')
if m[1] then
  -- A live key (with admissions already counted) is never overwritten. One loaded from an
  -- older revision with nothing admitted yet (its adjustment was lost with Redis writes)
  -- takes the newer total. A stock bucket that took part in a transfer (sent or received
  -- units, docs/design.md) is live too: a take lowers left and total alike, so left =
  -- total does not mean untouched, and a row read before the transfer's MySQL step would
  -- put the taken units back.
  if ver <= tonumber(m[3] or '-1') or tonumber(m[1]) ~= tonumber(m[2]) or m[4] or m[5] or redis.call('EXISTS', KEYS[2]) == 1 then
    return 0
  end
end
redis.call('HSET', KEYS[1], 'left', ARGV[1], 'total', ARGV[2], 'limit', ARGV[3], 'exp', ARGV[4], 'ver', ARGV[5])
redis.call('PEXPIREAT', KEYS[1], ARGV[4])
-- No transfer yet: no fields, so the key stays what a prize without buckets would be.
if KEYS[4] and (tonumber(ARGV[6]) ~= 0 or tonumber(ARGV[7]) ~= 0 or #ARGV > 7) then
  redis.call('HSET', KEYS[1], 'sent', ARGV[6], 'received', ARGV[7])
  local i = 8
  while i < #ARGV do
    -- in chunks: Lua's stack bounds how many arguments one call may take.
    local j = math.min(i + 999, #ARGV)
    redis.call('HSET', KEYS[4], unpack(ARGV, i, j))
    i = j + 1
  end
  if #ARGV > 7 then
    redis.call('PEXPIREAT', KEYS[4], ARGV[4])
  end
end
return 1
