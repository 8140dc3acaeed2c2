-- Pages fetched without pushback raise their domains' rate factors again (additive
-- increase): each by ``increase`` times the factor its last decrease left, up to 1. A
-- domain back at 1 whose pause is over has its state removed; one with no state is
-- left alone (nothing to raise); a state past its expiry is removed.
-- KEYS[1]  the shard's pushback states (hash domain -> JSON, Keys.pushback)
-- ARGV[1]  now (seconds)
-- ARGV[2]  increase per page
-- ARGV[3]  seconds a state is kept after its last change (the hash's TTL too)
-- ARGV[4..] per domain: the domain, pages fetched
-- Returns: the number of states changed or removed
local now, increase, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local names = {}
for i = 4, #ARGV, 2 do names[#names + 1] = ARGV[i] end
if #names == 0 then return 0 end
local values = redis.call('HMGET', KEYS[1], unpack(names))
local changed, gone = {}, {}
for n, value in ipairs(values) do
  if value then
    local state = cjson.decode(value)
    local pages = tonumber(ARGV[3 + 2 * n])
    state.factor = math.min(1, state.factor + increase * state.base * pages)
    if (tonumber(state.expires_at) or 0) <= now
        or (state.factor >= 1 and state['until'] <= now) then
      gone[#gone + 1] = names[n]
    else
      state.updated_at = now
      state.expires_at = now + ttl
      changed[#changed + 1] = names[n]
      changed[#changed + 1] = cjson.encode(state)
    end
  end
end
if #gone > 0 then redis.call('HDEL', KEYS[1], unpack(gone)) end
if #changed > 0 then
  redis.call('HSET', KEYS[1], unpack(changed))
  redis.call('PEXPIRE', KEYS[1], math.ceil(ttl * 1000))
end
return #gone + #changed / 2
