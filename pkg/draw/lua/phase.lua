-- Move a draw's phase in the stock gate's hash, under the reconciler's fence: arm it at
-- preheat ('entering', with the window), freeze the entry set ('drawing': no entry is taken
-- after this, whatever a gateway's clock says), hand returned units to the waitlist
-- ('waitlist') or, once the waitlist is empty, let what is left go first come, first served
-- ('fcfs'). Phases only move forward: entering -> drawing -> waitlist -> fcfs (a step may be
-- skipped); asking for an earlier one changes nothing, so a stale or repeated call is harmless.
-- KEYS: 1 meta, 2 fence. ARGV: 1 fence ('-' without a lease: the preheat's arming, and the
-- draw loop restoring the phase of keys a rebuild recreated without it, from MySQL; such a
-- call sets a phase only where none is, so it can never move one), 2 phase, 3 entry_from
-- (unix ms), 4 entry_until.
-- Returns the phase now in the hash, -1 when the keys are not loaded, -2 for a stale fence.
local order = {entering = 1, drawing = 2, waitlist = 3, fcfs = 4}
local fenced = ARGV[1] ~= '-'
if not order[ARGV[2]] then
  return redis.error_reply('unknown draw phase ' .. ARGV[2])
end
if fenced and tonumber(ARGV[1]) < tonumber(redis.call('GET', KEYS[2]) or '0') then
  return -2
end
local m = redis.call('HMGET', KEYS[1], 'draw', 'exp')
if not m[2] then
  return -1
end
if fenced then
  redis.call('SET', KEYS[2], ARGV[1], 'PXAT', m[2])
elseif m[1] then
  return m[1]
end
local want = ARGV[2]
if m[1] and order[m[1]] >= order[want] then
  return m[1]
end
if want == 'entering' or not m[1] then
  redis.call('HSET', KEYS[1], 'entry_from', ARGV[3], 'entry_until', ARGV[4])
end
redis.call('HSET', KEYS[1], 'draw', want)
return want
