-- Step 4 of a bucket transfer (docs/design.md): the destination bucket gets the units
-- MySQL already moved to its row, so Redis's left of a bucket never exceeds its MySQL row's.
-- KEYS: 1 meta, 2 fence, 3 transfers (hash: transfer id -> units), 4 revision.
-- ARGV: 1 fence, 2 transfer id, 3 units to add (moved in MySQL), 4 units the source took
--       (what the source's 'sent' counted: settled here, in 'received'), 5 the destination
--       row's version after the move, 6 expire at (unix ms) for the fence and revision when
--       the bucket is not loaded.
-- A repeat (the id is recorded) changes nothing. The revision is raised to the row's
-- version either way, so a preheat that read the row before the move is refused (load.lua)
-- instead of loading a total without these units.
-- Returns 1 given, 0 already given, -1 not loaded (revision recorded; the next preheat or
-- rebuild loads the units from the row), -2 stale fence.
local fence = tonumber(ARGV[1])
if fence < tonumber(redis.call('GET', KEYS[2]) or '0') then
  return -2
end
local m = redis.call('HMGET', KEYS[1], 'left', 'exp', 'ver')
local exp = m[2] or ARGV[6]
-- The fence is recorded even on a repeat (see take.lua).
redis.call('SET', KEYS[2], ARGV[1], 'PXAT', exp)
if redis.call('HEXISTS', KEYS[3], ARGV[2]) == 1 then
  return 0
end
local ver = tonumber(ARGV[5])
if ver > tonumber(redis.call('GET', KEYS[4]) or '-1') then
  redis.call('SET', KEYS[4], ARGV[5], 'PXAT', exp)
end
if not m[1] then
  return -1
end
redis.call('HINCRBY', KEYS[1], 'left', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'total', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'received', ARGV[4])
if ver > tonumber(m[3] or '-1') then
  redis.call('HSET', KEYS[1], 'ver', ARGV[5])
end
redis.call('HSET', KEYS[3], ARGV[2], ARGV[3])
redis.call('PEXPIREAT', KEYS[3], exp)
return 1
