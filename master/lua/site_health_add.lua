-- Add a job's counts of one crawl's sites (master/sitehealth.py) to the crawl's site
-- health hash, keeping the number of sites bounded: a site not yet in the hash is
-- admitted while fewer than ARGV[1] are; past that its counts go to the site "(other)".
-- Fields are "<site> <measure>" -> count; "<site> ~" marks an admitted site and
-- "~sites" counts them ("(other)" is never counted among them).
-- KEYS[1]  the crawl's site health hash (Keys.crawl_sites)
-- ARGV[1]  the most sites kept apart
-- ARGV[2]  the name the sites past the bound are counted under ("(other)")
-- ARGV[3]  seconds the hash lives after this call (twice the crawl's retention: the
--          crawl's retirement deletes it first; counts sent after that expire)
-- ARGV[4..]  triples: site, measure, count to add
-- Returns: how many counts went to "(other)" because the bound was reached.
local key = KEYS[1]
local most = tonumber(ARGV[1])
local other = ARGV[2]
local folded = 0
local admitted = {}
for i = 4, #ARGV, 3 do
  local site = ARGV[i]
  if site ~= other and admitted[site] == nil then
    if redis.call('HEXISTS', key, site .. ' ~') == 1 then
      admitted[site] = true
    elseif tonumber(redis.call('HGET', key, '~sites') or '0') < most then
      redis.call('HSET', key, site .. ' ~', 1)
      redis.call('HINCRBY', key, '~sites', 1)
      admitted[site] = true
    else
      admitted[site] = false
    end
  end
  if site ~= other and not admitted[site] then
    site = other
    folded = folded + 1
  end
  redis.call('HINCRBY', key, site .. ' ' .. ARGV[i + 1], tonumber(ARGV[i + 2]))
end
redis.call('EXPIRE', key, tonumber(ARGV[3]))
return folded
