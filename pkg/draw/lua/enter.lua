-- One user's entry into a draw prize's session, in one round trip: the gateway's whole work
-- for a grab during the entry window (no Kafka write: an entry is not a purchase).
-- KEYS: 1 meta (the stock gate's hash: 'draw' is the draw's phase, 'entry_from' and
--       'entry_until' its window in unix ms, 'exp' the keys' expiry), 2 entries (hash: user ->
--       entered at, unix ms), 3 early (hash: user -> refused entries before the window).
-- ARGV: 1 user id, 2 now (unix ms, the gateway's clock, like a grab's admission).
-- Returns {code, detail}: 0 entered now (detail: now), 1 entered before (detail: when),
-- 2 before the window (detail: this user's refused early entries so far), 3 the window has
-- closed (detail: when this user entered, or '' when they did not), 4 not armed (the keys
-- are not loaded, or not yet marked as a draw's), 5 the draw is over and what is left is
-- first come, first served (the gateway reserves like any grab).
local m = redis.call('HMGET', KEYS[1], 'draw', 'entry_from', 'entry_until', 'exp')
if not m[1] then
  return {4, ''}
end
local uid, now = ARGV[1], tonumber(ARGV[2])
if m[1] == 'fcfs' then
  return {5, ''}
end
if m[1] ~= 'entering' or now >= tonumber(m[3]) then
  -- Frozen (or past its end by this gateway's clock): the set is what it is.
  return {3, redis.call('HGET', KEYS[2], uid) or ''}
end
if now < tonumber(m[2]) then
  local n = redis.call('HINCRBY', KEYS[3], uid, 1)
  if n == 1 then
    redis.call('PEXPIREAT', KEYS[3], m[4])
  end
  return {2, tostring(n)}
end
-- One entry per user, whatever request or connection repeats it: the first one's time stays.
if redis.call('HSETNX', KEYS[2], uid, ARGV[2]) == 1 then
  if redis.call('HLEN', KEYS[2]) == 1 then
    redis.call('PEXPIREAT', KEYS[2], m[4])
  end
  return {0, ARGV[2]}
end
return {1, redis.call('HGET', KEYS[2], uid)}
