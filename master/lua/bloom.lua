-- One block of a multi-group Bloom filter (thesis 4.2.3.2): check, check-and-add or
-- remove a batch of URLs whose bits all live in this block, atomically. URLs are
-- handled in order, so a URL repeated within the batch is new only the first time.
-- Plain mode keeps one bit per position (u1), counting mode a 4-bit counter (u4).
-- KEYS[1]  the block (a Redis string used as a bit or counter array)
-- ARGV[1]  operation: "add" (check-and-add), "check", or "remove" (counting mode only)
-- ARGV[2]  cell type: "u1" (plain) or "u4" (counting)
-- ARGV[3]  positions per URL (groups x hashes per group)
-- ARGV[4]  hashes per group (used with "digests" input)
-- ARGV[5]  cells per group in this block (used with "digests" input)
-- ARGV[6]  input: "offsets" (ARGV[7..] are ARGV[3] cell positions per URL), or
--          "digests-independent" / "digests" (ARGV[7..] are one hex digest per URL;
--          positions derived here exactly as master/bloom.py derives them, each group
--          from its own 20 hex digits, or, for a filter made before that, all from the
--          first 20 by plain double hashing)
-- Returns: one integer per URL: 1 if new (add), present (check) or removed (remove), else 0.
local op, cell, per_url = ARGV[1], ARGV[2], tonumber(ARGV[3])
local hashes, group_cells, input = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local CHUNK = 7488  -- values per BITFIELD call: under unpack()'s ~8000, a multiple of 3 and 4

local positions = {}
if input == 'digests' or input == 'digests-independent' then
  local double = input == 'digests'
  local function number(hex, start) return tonumber(string.sub(hex, start, start + 9), 16) end
  for u = 7, #ARGV do
    local hex = ARGV[u]
    for i = 0, per_url - 1 do
      local group = math.floor(i / hashes)
      local offset
      if double then
        offset = number(hex, 1) + i * number(hex, 11)
      else
        local step, pair = i - group * hashes, 20 * group
        offset = number(hex, pair + 1) + step * number(hex, pair + 11) + (step ^ 3 - step) / 6
      end
      positions[#positions + 1] = group * group_cells + math.fmod(offset, group_cells)
    end
  end
else
  for u = 7, #ARGV do positions[#positions + 1] = tonumber(ARGV[u]) end
end

-- BITFIELD over all of ops (GET = 3 values, INCRBY = 4), a chunk per call, each chunk
-- opened with the same prefix (OVERFLOW applies per call).
local function bitfield(prefix, ops)
  local out = {}
  for start = 1, #ops, CHUNK do
    local args = {unpack(prefix)}
    for i = start, math.min(start + CHUNK - 1, #ops) do args[#args + 1] = ops[i] end
    for _, v in ipairs(redis.call('BITFIELD', KEYS[1], unpack(args))) do out[#out + 1] = v end
  end
  return out
end

local reads = {}
for _, pos in ipairs(positions) do
  reads[#reads + 1] = 'GET'; reads[#reads + 1] = cell; reads[#reads + 1] = '#' .. pos
end
local stored = bitfield({}, reads)

local delta = {}   -- position -> change made earlier in this batch
local writes = {}
local function change(idx, by)
  local pos = positions[idx]
  delta[pos] = (delta[pos] or 0) + by
  writes[#writes + 1] = 'INCRBY'; writes[#writes + 1] = cell
  writes[#writes + 1] = '#' .. pos; writes[#writes + 1] = by
end
local function value(idx) return stored[idx] + (delta[positions[idx]] or 0) end

local result = {}
for u = 0, #positions / per_url - 1 do
  local first, last = u * per_url + 1, u * per_url + per_url
  local present = true
  for idx = first, last do
    if value(idx) <= 0 then present = false end
  end
  local hit = present
  if op == 'add' then
    hit = not present
    for idx = first, last do
      if hit and (cell == 'u4' or value(idx) == 0) then change(idx, 1) end
    end
  elseif op == 'remove' and present then
    for idx = first, last do
      -- A saturated counter no longer knows its count: it stays (no false negatives).
      if stored[idx] < 15 then change(idx, -1) end
    end
  end
  result[#result + 1] = hit and 1 or 0
end
if #writes > 0 then bitfield({'OVERFLOW', 'SAT'}, writes) end
return result
