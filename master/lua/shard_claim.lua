-- A dispatcher takes, keeps or gives back one shard's lease: only the holder dispatches
-- the shard's pool (dispatch.lua checks), so several masters share the shards and one
-- that dies has its shards taken over once its leases expire.
-- KEYS[1]  the shard's owner (string: the holder's instance id, with a TTL)
-- ARGV[1]  this dispatcher's instance id
-- ARGV[2]  lease length in milliseconds
-- ARGV[3]  "hold" (take it if free, renew it if held) or "release" (give it back if held)
-- Returns: 1 if the caller holds the lease now, else 0.
local owner = redis.call('GET', KEYS[1])
if ARGV[3] == 'release' then
  if owner == ARGV[1] then redis.call('DEL', KEYS[1]) end
  return 0
end
if owner == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if owner then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
