-- Claim one due time of a recurring crawl: compare-and-set of a zset member's score, so
-- of all the instances that read the same due time only one moves it on (and records
-- the run it owes). Also used to re-claim a recorded run left unsubmitted. All keys are
-- cluster-wide (one hash tag).
-- KEYS[1]  the zset to claim in (schedules: id -> next due; runs: run JSON -> claimed at)
-- KEYS[2]  the runs zset (recorded with the claim), or absent
-- ARGV[1]  member
-- ARGV[2]  the score it was read with
-- ARGV[3]  its new score
-- ARGV[4]  run JSON to record in KEYS[2] (with a claim)
-- ARGV[5]  its score there (now)
-- Returns: 1 if claimed here, 0 if another instance (or a pause, a removal) was first.
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) ~= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
if KEYS[2] then
  redis.call('ZADD', KEYS[2], ARGV[5], ARGV[4])
end
return 1
