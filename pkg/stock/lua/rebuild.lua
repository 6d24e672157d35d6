-- Recreate a session×prize after Redis lost it, from the system of record, in one atomic
-- step: nothing is written unless the stock key is absent, so a rebuild that raced with
-- another (or with a preheat) never mixes its per-user counts and outcomes into live keys.
-- The stock key is written last in the same step; its presence is what lets admission
-- resume.
-- KEYS: 1 meta, 2 users, 3 outcomes, 4 fence, 5 returned.
-- ARGV: 1 fence, 2 left, 3 total, 4 limit, 5 expire at (ms), 6 number of users n,
--       7 number of returned units r, then n pairs (user, count), then r request ids (the
--       cancelled orders whose unit MySQL's left already counts for resale: recorded as
--       returned, so a return replayed later adds nothing), then pairs (request id, outcome).
-- A stock bucket (docs/design.md) adds KEYS 6 transfers and, after the outcomes, its ledger
-- of the transfers journal: pairs (transfer id, units), then sent, received, and last the
-- number of pairs; written in the same step, so a transfer resumed after the rebuild neither
-- takes nor gives twice.
-- Returns 1 created, 0 already there, -2 stale fence (a newer reconciler acted here).
local fence = tonumber(ARGV[1])
local seen = tonumber(redis.call('GET', KEYS[4]) or '0')
if fence < seen then
  return -2
end
redis.call('SET', KEYS[4], ARGV[1], 'PXAT', ARGV[5])
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local function hset_range(key, from, to)
  -- unpack in chunks: Lua's stack bounds how many arguments one call may take.
  local i = from
  while i <= to do
    local j = math.min(i + 999, to)
    redis.call('HSET', key, unpack(ARGV, i, j))
    i = j + 1
  end
end
local users_end = 7 + 2 * tonumber(ARGV[6])
if users_end > 7 then
  hset_range(KEYS[2], 8, users_end)
  redis.call('PEXPIREAT', KEYS[2], ARGV[5])
end
local returned_end = users_end + tonumber(ARGV[7])
if returned_end > users_end then
  for i = users_end + 1, returned_end do
    redis.call('HSET', KEYS[5], ARGV[i], '1')
  end
  redis.call('PEXPIREAT', KEYS[5], ARGV[5])
end
local outcomes_end = #ARGV
if KEYS[6] then
  local pairs_n = tonumber(ARGV[#ARGV])
  outcomes_end = #ARGV - 3 - 2 * pairs_n
end
if outcomes_end > returned_end then
  hset_range(KEYS[3], returned_end + 1, outcomes_end)
  redis.call('PEXPIREAT', KEYS[3], ARGV[5])
end
redis.call('HSET', KEYS[1], 'left', ARGV[2], 'total', ARGV[3], 'limit', ARGV[4], 'exp', ARGV[5])
redis.call('PEXPIREAT', KEYS[1], ARGV[5])
if KEYS[6] and (tonumber(ARGV[#ARGV - 2]) ~= 0 or tonumber(ARGV[#ARGV - 1]) ~= 0 or #ARGV - 3 > outcomes_end) then
  redis.call('HSET', KEYS[1], 'sent', ARGV[#ARGV - 2], 'received', ARGV[#ARGV - 1])
  if #ARGV - 3 > outcomes_end then
    hset_range(KEYS[6], outcomes_end + 1, #ARGV - 3)
    redis.call('PEXPIREAT', KEYS[6], ARGV[5])
  end
end
return 1
