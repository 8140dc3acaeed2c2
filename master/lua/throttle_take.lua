-- One job's take in one shard: for each of the job's domains named, take up to N tasks
-- of its queue, as many as both sliding windows allow (thesis 4.2.2: per spider type
-- and per host IP, scrapy-cluster semantics), record the take in both windows, and
-- lease the tasks to the job. A domain whose queue is empty leaves the job's domain set
-- (the dispatcher adds it again with its next task, in the same shard, atomically).
-- Every key is of the shard of KEYS[1].
-- The windows of all the shard's domains are fields of one hash, read in one HMGET and
-- written in one HSET: a window holds hits per twentieth of it, not an entry per hit.
-- Once a minute a call sweeps a slice of the hash for windows whose last take is older
-- than the longest window, and sets the hash to expire once all of them would be.
-- KEYS[1]  the shard's leases (zset of task JSON, score = lease expiry)
-- KEYS[2]  the job's domains in the shard (set)
-- KEYS[3]  the shard's lease owners (hash task JSON -> job)
-- KEYS[4]  the shard's throttle windows (hash, Keys.throttle)
-- KEYS[5]  the shard's pushback states (hash domain -> JSON, Keys.pushback), optional (swept
--          with the windows, for states past their expiry; its cursor in '~takecursor'): a
--          paused domain answers "pause:<seconds to its pause's end>"; a domain's rate
--          factor scales both its limits (fewer hits, or one hit in a longer window), and
--          a domain with a state has its hits spaced over the window for the whole
--          cluster (``last_at``: when its last hit was due; the next is an interval at
--          the current rate later), not taken at once.
--          A domain without a state gets one, its factor starting at ARGV[7] (slow
--          start: the factor doubles every second until a pushback or 1).
-- ARGV[1]  now (seconds)
-- ARGV[2]  lease expiry time
-- ARGV[3]  queue key template, string.format(template, job, domain)
-- ARGV[4]  the job
-- ARGV[5]  its spider type
-- ARGV[6]  its host ip
-- ARGV[7]  slow start: the factor a domain without a state starts at (0 or 1: none)
-- ARGV[8]  share of its factor after a decrease a domain's factor regains a second
-- ARGV[9]  seconds a new state is kept (the pushback hash's TTL too)
-- ARGV[10..] per domain: domain, hits allowed per window by spider type, hits allowed per
--          window from the host ip, window length in milliseconds, tasks wanted at most
--          (-1: no task, one hit made outside the queues, a browser's own request)
-- Returns: {the job's domains in the shard now, then per domain named: a list of task
-- JSON; or "wait:<seconds>" while a window is full (or spacing holds the next hit);
-- "pause:<seconds>" while the domain is paused; or 0 if the queue is empty; or 1
-- for a hit recorded; then, with KEYS[5], a list: domain, rate factor, ... of the domains
-- named whose factor is below 1}
local now = tonumber(ARGV[1])
local start_factor, increase, ttl = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local SLOTS, SWEEP_EVERY, SWEEP_SLICE = 20, 60, 200
-- Seconds of spacing a spaced domain may make up in one take (at least half its interval):
-- a take every scheduler tick keeps a fast domain's rate, an idle one gets no burst.
local CATCH_UP = 0.1

-- command(key, args...) in pieces small enough for unpack (an even count each).
local function batched(command, key, args)
  for start = 1, #args, 7000 do
    redis.call(command, key, unpack(args, start, math.min(start + 6999, #args)))
  end
end

-- A window is counts of hits per slot of a twentieth of it: "<slot length>|<first
-- slot>|<count>,<count>,...", slot n covering [n, n + 1) slot lengths since the epoch.
-- A hit counts as made at its slot's end: it leaves the window up to a slot late, never
-- early. Returns {length, first slot, counts} of the slots still inside, and their hits.
local function inside(value, window_s)
  local length = window_s / SLOTS
  local hits, used, low, high = {}, 0, nil, nil   -- hits by slot of this window
  if value then
    local old_length, first, counts = string.match(value, '^([^|]+)|([^|]+)|(.*)$')
    old_length, first = tonumber(old_length), tonumber(first)
    local n = 0
    for count in string.gmatch(counts, '%d+') do
      local ends = (first + n + 1) * old_length      -- when the slot's hits were made
      count = tonumber(count)
      if count > 0 and ends + window_s > now then
        -- The same slot; if the window's length changed, the first that ends no earlier.
        local slot = first + n
        if old_length ~= length then slot = math.ceil(ends / length) - 1 end
        hits[slot] = (hits[slot] or 0) + count
        used = used + count
        low, high = math.min(low or slot, slot), math.max(high or slot, slot)
      end
      n = n + 1
    end
  end
  local slots = {length = length, first = low or math.floor(now / length), counts = {}}
  for slot = slots.first, high or slots.first - 1 do
    slots.counts[#slots.counts + 1] = hits[slot] or 0
  end
  return slots, used
end

-- Room left in a window, or 0 and the seconds until enough of it has passed for one hit.
local function room(slots, used, allowed, window_s)
  if allowed <= 0 then return 0, window_s end
  if used < allowed then return allowed - used, 0 end
  for n, count in ipairs(slots.counts) do
    used = used - count
    if used < allowed then
      return 0, math.max((slots.first + n) * slots.length + window_s - now, 0)
    end
  end
  return 0, window_s
end

-- The window with ``hits`` more made now, as stored (in a later slot if a shorter
-- window's slots made of a longer one's reach past now).
local function record(slots, hits)
  local at = math.max(math.floor(now / slots.length) - slots.first + 1, 1)
  for pad = #slots.counts + 1, at do slots.counts[pad] = 0 end
  slots.counts[at] = slots.counts[at] + hits
  return string.format('%.17g|%d|', slots.length, slots.first) .. table.concat(slots.counts, ',')
end

-- (hits, window) of a limit at ``factor`` of its rate: fewer hits in the window while at
-- least 2 are left, else one hit in a window as much longer as the rate is lower.
local function scaled(hits, window_s, factor)
  if factor >= 1 or hits <= 0 then return hits, window_s end
  local rate = hits * factor
  if rate >= 2 then return math.floor(rate), window_s end
  return 1, window_s / rate
end

-- A state's factor now: the factor its last decrease left (base), regained once its pause
-- is over: doubling a second in slow start, else ``increase`` of base a second; up to 1.
-- (pushback_report.lua computes the same.)
local function factor_now(state)
  local since = now - math.max(tonumber(state.decreased_at) or 0, tonumber(state['until']) or 0)
  local base = tonumber(state.base) or 1
  if since <= 0 then return base end
  if state.start then return math.min(1, base * 2 ^ since) end
  return math.min(1, base * (1 + increase * since))
end

-- Pushback state of the domains named (KEYS[5]): domain -> state; states past their
-- expiry are dropped. ``changed``: states to write back.
local pushback, changed, created = {}, {}, false
if KEYS[5] then
  local names = {}
  for i = 10, #ARGV, 5 do names[#names + 1] = ARGV[i] end
  local states, stale = redis.call('HMGET', KEYS[5], unpack(names)), {}
  for n, value in ipairs(states) do
    if value then
      local state = cjson.decode(value)
      if (tonumber(state.expires_at) or 0) > now then
        state.factor = factor_now(state)
        pushback[names[n]] = state
      else
        stale[#stale + 1] = names[n]
      end
    end
  end
  if #stale > 0 then redis.call('HDEL', KEYS[5], unpack(stale)) end
end

-- Read every window named, and the sweep's state, in one command.
local domains, fields = {}, {'~swept', '~cursor', '~window'}
for i = 10, #ARGV, 5 do
  local domain = ARGV[i]
  domains[#domains + 1] = {name = domain, hits = tonumber(ARGV[i + 1]),
                           ip_hits = tonumber(ARGV[i + 2]),
                           window_s = tonumber(ARGV[i + 3]) / 1000,
                           wanted = tonumber(ARGV[i + 4]),
                           by_type = 'type|' .. ARGV[5] .. '|' .. domain,
                           by_ip = 'ip|' .. ARGV[6] .. '|' .. domain}
  fields[#fields + 1] = domains[#domains].by_type
  fields[#fields + 1] = domains[#domains].by_ip
end
local values = redis.call('HMGET', KEYS[4], unpack(fields))
local current = {}
for n, field in ipairs(fields) do current[field] = values[n] end

-- A new domain's state, in slow start (KEYS[5] given and 0 < ARGV[7] < 1), or nil.
local function started(domain)
  local factor = start_factor
  if not KEYS[5] or factor <= 0 or factor >= 1 or domain.hits <= 0 then return nil end
  local state = {factor = factor, base = factor, start = true, ['until'] = 0, pushbacks = 0,
                 decreased_at = now, reason = 'slow start', updated_at = now,
                 expires_at = now + ttl}
  pushback[domain.name] = state
  changed[domain.name] = state
  created = true
  return state
end

-- Hits the spacing of a state's domain allows now (one per ``interval`` s for the whole
-- cluster), and the seconds until the next if none.
local function spacing_room(state, interval)
  local from = math.max((tonumber(state.last_at) or 0) + interval,
                       now - math.max(interval / 2, CATCH_UP))
  if from > now then return 0, from - now, from end
  return math.floor((now - from) / interval) + 1, 0, from
end

local written, longest = {}, 0            -- windows to write back: field -> value
local function take(domain)
  local queue = string.format(ARGV[3], ARGV[4], domain.name)
  local fresh = not pushback[domain.name]
  local state = pushback[domain.name] or started(domain)
  if state and state['until'] > now then
    return 'pause:' .. string.format('%.3f', state['until'] - now)
  end
  local factor = state and state.factor or 1
  local hits, window_s = scaled(domain.hits, domain.window_s, factor)
  local ip_hits, ip_window_s = scaled(domain.ip_hits, domain.window_s, factor)
  longest = math.max(longest, window_s, ip_window_s)
  local type_slots, type_used = inside(current[domain.by_type], window_s)
  local ip_slots, ip_used = inside(current[domain.by_ip], ip_window_s)
  local type_room, type_wait = room(type_slots, type_used, hits, window_s)
  local ip_room, ip_wait = room(ip_slots, ip_used, ip_hits, ip_window_s)
  local interval, spaced_from = hits > 0 and window_s / hits or 0, 0
  if state and hits > 0 then
    local spaced, spaced_wait
    spaced, spaced_wait, spaced_from = spacing_room(state, interval)
    type_room, type_wait = math.min(type_room, spaced), math.max(type_wait, spaced_wait)
  end
  -- both windows, with ``hits`` more made now, to be written back
  local function add_hits(hits)
    written[#written + 1] = domain.by_type
    written[#written + 1] = record(type_slots, hits)
    written[#written + 1] = domain.by_ip
    written[#written + 1] = record(ip_slots, hits)
    if state and interval > 0 then
      state.last_at = spaced_from + (hits - 1) * interval
      changed[domain.name] = state
    end
  end
  if domain.wanted < 0 and math.min(type_room, ip_room) > 0 then
    add_hits(1)
    return 1
  end
  local count = math.min(domain.wanted, type_room, ip_room)
  local popped = {}
  if count > 0 then popped = redis.call('ZPOPMIN', queue, count) end
  if domain.wanted >= 0 and #popped == 0 and (count > 0 or redis.call('ZCARD', queue) == 0) then
    redis.call('SREM', KEYS[2], domain.name)
    if fresh then changed[domain.name] = nil end     -- no state for a domain left
    return 0
  end
  if count <= 0 then return 'wait:' .. string.format('%.3f', math.max(type_wait, ip_wait)) end
  local tasks = {}
  for i = 1, #popped, 2 do tasks[#tasks + 1] = popped[i] end
  add_hits(#tasks)
  return tasks
end

local replies, leases, owners = {}, {}, {}
for _, domain in ipairs(domains) do
  local reply = take(domain)
  replies[#replies + 1] = reply
  if type(reply) == 'table' then
    for _, member in ipairs(reply) do
      leases[#leases + 1] = ARGV[2]
      leases[#leases + 1] = member
      owners[#owners + 1] = member
      owners[#owners + 1] = ARGV[4]
    end
  end
end
batched('ZADD', KEYS[1], leases)
batched('HSET', KEYS[3], owners)

-- Windows whose last take is older than the longest window are gone: a slice a minute.
local known_longest = tonumber(current['~window']) or 0
local grew = longest > known_longest
longest = math.max(longest, known_longest)
if grew then
  written[#written + 1] = '~window'
  written[#written + 1] = tostring(longest)
end
local sweep_due = now - (tonumber(current['~swept']) or 0) >= SWEEP_EVERY
if sweep_due then
  local scan = redis.call('HSCAN', KEYS[4], current['~cursor'] or '0', 'COUNT', SWEEP_SLICE)
  local stale, pairs_found = {}, scan[2]
  for n = 1, #pairs_found, 2 do
    local field, value = pairs_found[n], pairs_found[n + 1]
    local length, first, counts = string.match(value, '^([^|]+)|([^|]+)|(.*)$')
    local slots = select(2, string.gsub(counts or '', ',', ','))
    if string.sub(field, 1, 1) ~= '~'
        and (not length or (tonumber(first) + slots + 1) * tonumber(length) <= now - longest) then
      stale[#stale + 1] = field
    end
  end
  if #stale > 0 then batched('HDEL', KEYS[4], stale) end
  for _, field in ipairs({'~swept', tostring(now), '~cursor', scan[1]}) do
    written[#written + 1] = field
  end
end
if #written > 0 then batched('HSET', KEYS[4], written) end
if sweep_due or grew then
  -- Every take until the next sweep ends within its window of this.
  redis.call('PEXPIRE', KEYS[4], math.ceil((SWEEP_EVERY + longest) * 1000))
end
table.insert(replies, 1, redis.call('SMEMBERS', KEYS[2]))
if KEYS[5] then
  local states = {}
  for domain, state in pairs(changed) do
    states[#states + 1] = domain
    states[#states + 1] = cjson.encode(state)
  end
  if #states > 0 then batched('HSET', KEYS[5], states) end
  if created then redis.call('PEXPIRE', KEYS[5], math.ceil(ttl * 1000)) end
  if sweep_due and redis.call('EXISTS', KEYS[5]) == 1 then
    -- States past their expiry, of domains no take names any more: a slice a minute
    -- (the cursor in field '~takecursor'), or new states would keep the hash for ever.
    local scan = redis.call('HSCAN', KEYS[5], redis.call('HGET', KEYS[5], '~takecursor') or '0',
                            'COUNT', SWEEP_SLICE)
    local stale, found = {}, scan[2]
    for n = 1, #found, 2 do
      local ok, old = pcall(cjson.decode, found[n + 1])
      if string.sub(found[n], 1, 1) ~= '~' and not changed[found[n]]
          and (not ok or type(old) ~= 'table' or (tonumber(old.expires_at) or 0) <= now) then
        stale[#stale + 1] = found[n]
      end
    end
    if #stale > 0 then batched('HDEL', KEYS[5], stale) end
    redis.call('HSET', KEYS[5], '~takecursor', scan[1])
  end
  local factors = {}
  for domain, state in pairs(pushback) do
    if state.factor < 1 then
      factors[#factors + 1] = domain
      factors[#factors + 1] = tostring(state.factor)
    end
  end
  replies[#replies + 1] = factors
end
return replies
