-- Record a visit of an adaptively revisited hub and schedule its next one. The span
-- to the next visit shrinks when what the hub lists changed (by FASTER, or by
-- FASTEST from the third change in a row) and grows when it did not (by SLOWER),
-- within [MIN, MAX]; a first visit only records. Every key is of the hub's shard.
-- KEYS[1]  the shard's hubs (zset of hub task JSON, score = when next due)
-- KEYS[2]  the shard's hub state (hash url -> JSON)
-- ARGV[1]  the hub task JSON (as in KEYS[1]; rescheduled only if still there)
-- ARGV[2]  its URL
-- ARGV[3]  now (seconds)
-- ARGV[4]  fingerprint of what it lists now, or "" when the server said 304 Not Modified
-- ARGV[5]  ETag ("" if none)
-- ARGV[6]  Last-Modified ("" if none)
-- ARGV[7]  span to start from (the crawl's hub_span)
-- ARGV[8]  MIN: the shortest span
-- ARGV[9]  MAX: the longest span
-- ARGV[10] FASTER: the span's factor on a change
-- ARGV[11] FASTEST: its factor from the third change in a row
-- ARGV[12] SLOWER: its factor when nothing changed
-- Returns: {1 if changed else 0, the new span as a string}.
local raw = redis.call('HGET', KEYS[2], ARGV[2])
local state = raw and cjson.decode(raw) or {}
local min, max = tonumber(ARGV[8]), tonumber(ARGV[9])
local span = tonumber(state['span'] or ARGV[7])
local changed = false
if ARGV[4] ~= '' and state['fingerprint'] ~= nil then
  changed = state['fingerprint'] ~= ARGV[4]
end
if state['fingerprint'] ~= nil or ARGV[4] == '' then
  if changed then
    state['run'] = (state['run'] or 0) + 1
    state['changes'] = (state['changes'] or 0) + 1
    span = span * tonumber(state['run'] >= 3 and ARGV[11] or ARGV[10])
  else
    state['run'] = 0
    span = span * tonumber(ARGV[12])
  end
end
span = math.min(max, math.max(min, span))
state['span'] = span
state['visits'] = (state['visits'] or 0) + 1
state['visited_at'] = tonumber(ARGV[3])
if ARGV[4] ~= '' then state['fingerprint'] = ARGV[4] end
if ARGV[5] ~= '' then state['etag'] = ARGV[5] end
if ARGV[6] ~= '' then state['last_modified'] = ARGV[6] end
redis.call('HSET', KEYS[2], ARGV[2], cjson.encode(state))
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], tonumber(ARGV[3]) + span, ARGV[1])
end
return {changed and 1 or 0, tostring(span)}
