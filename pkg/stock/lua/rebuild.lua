-- Recreate a session×prize's stock key after Redis lost it, once the per-user counts and
-- outcomes were written back (they are written first, in chunks; the stock key last, since
-- its presence is what lets admission resume). KEYS: 1 meta.
-- ARGV: 1 left, 2 total, 3 limit, 4 expire at (ms). Returns 1 created, 0 already there.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'left', ARGV[1], 'total', ARGV[2], 'limit', ARGV[3], 'exp', ARGV[4])
redis.call('PEXPIREAT', KEYS[1], ARGV[4])
return 1
