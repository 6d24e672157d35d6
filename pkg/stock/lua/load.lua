-- Preheat one session×prize: create its stock key only if absent, so a live key (with
-- admissions already counted) is never overwritten. KEYS: 1 meta.
-- ARGV: 1 left, 2 total, 3 per-user limit, 4 expire at (unix ms). Returns 1 loaded, 0 kept.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'left', ARGV[1], 'total', ARGV[2], 'limit', ARGV[3], 'exp', ARGV[4])
redis.call('PEXPIREAT', KEYS[1], ARGV[4])
return 1
