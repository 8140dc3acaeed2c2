-- A site pushed back (a 429 or 503, a burst of 403s, a block page): lower its domain's
-- rate factor for the whole cluster (multiplicative decrease, at most once per window of
-- its limit, so the answers to requests already out count once; never below the floor)
-- and pause the domain until now + the pause asked for (a pause already longer stays).
-- The state is JSON: factor, base (the factor the last decrease left), until (pause end),
-- pushbacks, reason, decreased_at, updated_at, expires_at (updated_at + the TTL).
-- KEYS[1]  the shard's pushback states (hash domain -> JSON, Keys.pushback)
-- ARGV[1]  now (seconds)
-- ARGV[2]  the domain
-- ARGV[3]  seconds to pause it (Retry-After, capped; or the default pause)
-- ARGV[4]  decrease: the factor is multiplied by this
-- ARGV[5]  floor: the least factor
-- ARGV[6]  the domain's window (seconds): one decrease per window at most
-- ARGV[7]  seconds the state is kept after its last change (the hash's TTL too)
-- ARGV[8]  the reason (e.g. "429", "503", "403 burst", "block page")
-- Returns: {factor, pause end, pushbacks} as strings
local now, domain = tonumber(ARGV[1]), ARGV[2]
local pause, decrease, floor = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local window, ttl = tonumber(ARGV[6]), tonumber(ARGV[7])

local state = {factor = 1, base = 1, ['until'] = 0, pushbacks = 0, decreased_at = 0}
local stored = redis.call('HGET', KEYS[1], domain)
if stored then
  local old = cjson.decode(stored)
  if (tonumber(old.expires_at) or 0) > now then state = old end
end
state.pushbacks = state.pushbacks + 1
state.reason = ARGV[8]
if now - state.decreased_at >= window then
  state.factor = math.max(floor, state.factor * decrease)
  state.base = state.factor
  state.decreased_at = now
end
state['until'] = math.max(state['until'], now + pause)
state.updated_at = now
state.expires_at = now + ttl
redis.call('HSET', KEYS[1], domain, cjson.encode(state))
redis.call('PEXPIRE', KEYS[1], math.ceil(ttl * 1000))
return {tostring(state.factor), tostring(state['until']), tostring(state.pushbacks)}
