-- Change a not yet opened session×prize's total to match its adjusted stock row. It runs
-- inside the adjustment's MySQL transaction, before the commit, with the row locked.
-- KEYS: 1 meta, 2 reserved, 3 revision.
-- ARGV 'set': 2 new total, 3 the row's new version, 4 expire at (unix ms) for the revision.
--   Records the revision whether or not the key is loaded, so a preheat that read the row
--   before this adjustment cannot load the old total afterwards (load.lua refuses it).
--   Returns 1 changed, 0 not loaded (the next preheat loads the new total from MySQL),
--   -1 refused because grabs were already admitted (left ~= total or a reservation exists),
--   -2 refused because Redis holds a newer revision.
-- ARGV 'undo': 2 the version being undone, 3 total to restore, 4 version to restore.
--   Reverts a 'set' whose transaction did not commit (called with the row locked again),
--   only where that 'set' is still what Redis holds. Returns 1.
local m = redis.call('HMGET', KEYS[1], 'left', 'total', 'ver')
local admitted = m[1] and (tonumber(m[1]) ~= tonumber(m[2]) or redis.call('EXISTS', KEYS[2]) == 1)
if ARGV[1] == 'undo' then
  if redis.call('GET', KEYS[3]) == ARGV[2] then
    redis.call('SET', KEYS[3], ARGV[4], 'KEEPTTL')
  end
  if m[1] and m[3] == ARGV[2] and not admitted then
    redis.call('HSET', KEYS[1], 'left', ARGV[3], 'total', ARGV[3], 'ver', ARGV[4])
  end
  return 1
end
local ver = tonumber(ARGV[3])
if ver < tonumber(redis.call('GET', KEYS[3]) or '-1') or ver < tonumber(m[3] or '-1') then
  return -2
end
if admitted then
  return -1
end
redis.call('SET', KEYS[3], ARGV[3], 'PXAT', ARGV[4])
if not m[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'left', ARGV[2], 'total', ARGV[2], 'ver', ARGV[3])
return 1
