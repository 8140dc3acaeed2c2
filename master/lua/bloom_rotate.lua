-- Replace a Bloom filter's generation list, if nobody changed it since it was read: of
-- several masters that find the newest generation full at once, one starts the next.
-- KEYS[1]  the generation list (JSON string)
-- ARGV[1]  the list as it was read ("" if it did not exist)
-- ARGV[2]  the new list
-- Returns: 1 if replaced here, 0 if the list had changed.
local current = redis.call('GET', KEYS[1]) or ''
if current ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2])
return 1
