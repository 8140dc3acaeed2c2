-- A site pushed back (a 429 or 503, a burst of 403s, a block page): lower its domain's
-- rate factor for the whole cluster (multiplicative decrease, at most once per window of
-- its limit, so the answers to requests already out count once; never below the floor)
-- and pause the domain until now + the pause asked for (a pause already longer stays).
-- The factor decreased is the one in force now (throttle_take.lua's factor_now: the last
-- decrease's, regained since its pause ended); a pushback ends a slow start, halving it.
-- The state is JSON: factor, base (the factor the last decrease left), start (in slow
-- start), until (pause end), last_at (throttle_take.lua's spacing), pushbacks, reason,
-- decreased_at, updated_at, expires_at (updated_at + the TTL).
-- KEYS[1]  the shard's pushback states (hash domain -> JSON, Keys.pushback)
-- ARGV[1]  now (seconds)
-- ARGV[2]  the domain
-- ARGV[3]  seconds to pause it (Retry-After, capped; or the default pause)
-- ARGV[4]  decrease: the factor is multiplied by this
-- ARGV[5]  floor: the least factor
-- ARGV[6]  the domain's window (seconds): one decrease per window at most
-- ARGV[7]  seconds the state is kept after its last change (the hash's TTL too)
-- ARGV[8]  the reason (e.g. "429", "503", "403 burst", "block page")
-- ARGV[9]  share of its base a factor regains a second once its pause is over
-- Each call also sweeps a slice of the hash (HSCAN, SWEEP_SLICE fields, from the cursor
-- kept in its field '~cursor'): states past their expiry, or back at factor 1 with their
-- pause over, are removed, so the domains of a shard that keeps reporting do not pile up
-- though each report sets the hash's TTL again.
-- Returns: {factor, pause end, pushbacks} as strings
local now, domain = tonumber(ARGV[1]), ARGV[2]
local pause, decrease, floor = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local window, ttl, increase = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[9])

local function factor_now(state)
  local since = now - math.max(tonumber(state.decreased_at) or 0, tonumber(state['until']) or 0)
  local base = tonumber(state.base) or 1
  if since <= 0 then return base end
  if state.start then return math.min(1, base * 2 ^ since) end
  return math.min(1, base * (1 + increase * since))
end

local state = {factor = 1, base = 1, ['until'] = 0, pushbacks = 0, decreased_at = 0}
local stored = redis.call('HGET', KEYS[1], domain)
if stored then
  local old = cjson.decode(stored)
  if (tonumber(old.expires_at) or 0) > now then state = old end
end
state.pushbacks = state.pushbacks + 1
state.reason = ARGV[8]
state.factor = factor_now(state)
if state.start then
  -- The end of a slow start: back to the rate of a second ago (it has doubled since),
  -- the last the site is known to have let through.
  state.factor = math.max(floor, state.base, state.factor / 2)
  state.base = state.factor
  state.decreased_at = now
  state.start = false
elseif now - state.decreased_at >= window then
  state.factor = math.max(floor, state.factor * decrease)
  state.base = state.factor
  state.decreased_at = now
end
state['until'] = math.max(state['until'], now + pause)
state.updated_at = now
state.expires_at = now + ttl
redis.call('HSET', KEYS[1], domain, cjson.encode(state))

local SWEEP_SLICE = 100
local scan = redis.call('HSCAN', KEYS[1], redis.call('HGET', KEYS[1], '~cursor') or '0',
                        'COUNT', SWEEP_SLICE)
local stale, found = {}, scan[2]
for n = 1, #found, 2 do
  local field = found[n]
  if field ~= domain and string.sub(field, 1, 1) ~= '~' then
    local ok, old = pcall(cjson.decode, found[n + 1])
    if not ok or type(old) ~= 'table' or (tonumber(old.expires_at) or 0) <= now
        or ((tonumber(old.factor) or 1) >= 1 and (tonumber(old['until']) or 0) <= now) then
      stale[#stale + 1] = field
    end
  end
end
if #stale > 0 then redis.call('HDEL', KEYS[1], unpack(stale)) end
redis.call('HSET', KEYS[1], '~cursor', scan[1])
redis.call('PEXPIRE', KEYS[1], math.ceil(ttl * 1000))
return {tostring(state.factor), tostring(state['until']), tostring(state.pushbacks)}
