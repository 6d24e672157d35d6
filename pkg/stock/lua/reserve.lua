-- Admission of one or more grabs of one session×prize, atomically, in one round trip.
-- KEYS: 1 meta (hash: left, total, limit, exp, ver), 2 users (hash: user -> admitted count),
--       3 reserved (hash: request id -> "user|admitted_ms"), 4 outcomes (hash: request id ->
--       "user|s|order_id" or "user|r|reason"). All share one hash tag (one cluster slot).
-- ARGV: one triple per grab: request id, user id, now (unix ms).
-- Returns {code, left, detail} per grab, flattened in ARGV's order: 0 admitted, 1 seen
-- before (detail = first verdict's state), 2 limit, 3 sold out, 4 not loaded, 5 request id
-- belongs to another user, 6 the prize's units are given by its draw now (package draw):
-- only the draw's own request ids ("<session>-<prize>-draw.<digest>", which no client's
-- key can become) are admitted until its phase is 'fcfs'.
--
-- The grabs are judged one after another, each exactly as if it ran alone in that order:
-- each one sees what the ones before it wrote (a request id admitted by an earlier triple is
-- "seen", a user's earlier triple counts against the limit). Batching them saves the
-- gateway's coalescer one script call per grab; it changes no verdict.
--
-- Order matters: the duplicate and per-user checks come before any deduction, so a retried
-- EVALSHA (go-redis retries a timed-out reply) or a repeat click never deducts twice.
local out = {}
local meta = redis.call('HMGET', KEYS[1], 'left', 'limit', 'exp', 'draw')
if not meta[1] then
  -- Never create the key: a missing key means "not loaded", not "zero" or "-1".
  for i = 1, #ARGV, 3 do
    out[#out + 1] = 4; out[#out + 1] = -1; out[#out + 1] = ''
  end
  return out
end
local left = tonumber(meta[1])
local limit = tonumber(meta[2])
local drawing = meta[4] and meta[4] ~= 'fcfs'
local admitted = false

local function judge(rid, uid, now)
  local seen = redis.call('HGET', KEYS[3], rid)
  local state = 'queued'
  if not seen then
    seen = redis.call('HGET', KEYS[4], rid)
    state = 'settled'
  end
  if seen then
    local owner = string.match(seen, '^([^|]*)')
    if owner ~= uid then
      return 5, left, ''
    end
    if state == 'settled' then
      state = string.sub(seen, #owner + 2)
    end
    return 1, left, state
  end

  if drawing and not string.find(rid, '^%d+%-%d+%-draw%.') then
    return 6, left, ''
  end
  local n = tonumber(redis.call('HGET', KEYS[2], uid) or '0')
  if n >= limit then
    return 2, left, ''
  end
  if left <= 0 then
    return 3, 0, ''
  end

  left = redis.call('HINCRBY', KEYS[1], 'left', -1)
  redis.call('HINCRBY', KEYS[2], uid, 1)
  redis.call('HSET', KEYS[3], rid, uid .. '|' .. now)
  admitted = true
  return 0, left, ''
end

for i = 1, #ARGV, 3 do
  local code, l, detail = judge(ARGV[i], ARGV[i + 1], ARGV[i + 2])
  out[#out + 1] = code; out[#out + 1] = l; out[#out + 1] = detail
end
if admitted then
  -- The hashes live exactly as long as the stock key (session end + grace), set at preheat.
  redis.call('PEXPIREAT', KEYS[2], meta[3])
  redis.call('PEXPIREAT', KEYS[3], meta[3])
end
return out
