-- sluice: the commonest request's decision alone: one fixed_window check of a whole request
-- (one descriptor, one limit, epoch-aligned window). The same decision as decide.lua gives
-- such a request, on the same state ('window_start count' in the same key, so both scripts
-- can share keys), without decide.lua's per-call setup (its closures, tables and argument
-- loop cost several times the work itself). Written by src/store/redis/script.rs:
--
--   KEYS[1]   the key
--   ARGV[1]   now in microseconds, or '' to read the Redis clock (TIME)
--   ARGV[2]   limit      ARGV[3] window (us, >= 1)      ARGV[4] hits
--   ARGV[5]   mode: 0, or 1 refund + 2 charge always
--
-- Reply: { now, allowed, remaining, reset (us), charged, allowed in the first pass } as
-- decide.lua's for one check.

local MAX = 9007199254740991 -- 2^53 - 1
local COUNT_CAP = 4503599627370496 -- 2^52 (src/algorithm/mod.rs COUNT_CAP)
local GRACE_MS = 1000 -- as decide.lua: state outlives its window by this much

local now = tonumber(ARGV[1])
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local limit = tonumber(ARGV[2])
local w = tonumber(ARGV[3])
local hits = tonumber(ARGV[4])
local mode = tonumber(ARGV[5])

-- The epoch-aligned window of now (fmod is exact; made Euclidean before the epoch).
local r = math.fmod(now, w)
if r < 0 then
  r = r + w
end
local ws = now - r
local we = ws + w
if we > MAX then
  we = MAX
end

-- The stored window (decide.lua `pair`): a later one than ours wins (a clock running ahead).
local start, e, count = ws, we, 0
local raw = redis.call('GET', KEYS[1])
if raw then
  local a, b = string.match(raw, '^%s*(%-?%d+)%s+(%-?%d+)%s*$')
  if a ~= nil then
    a, b = tonumber(a), tonumber(b)
    if b >= 0 and a >= ws then
      if a ~= ws then
        start, e = a, a + (we - ws)
        if e > MAX then
          e = MAX
        end
      end
      count = b
    end
  end
end
local until_end = e - now
if until_end < 0 then
  until_end = 0
end

local allowed, after, rem
if mode % 2 == 1 then
  -- refund
  allowed = true
  after = count - hits
  if after < 0 then
    after = 0
  end
  rem = limit - after
  if rem < 0 then
    rem = 0
  end
else
  allowed = count + hits <= limit
  after = count + hits
  if after > MAX then
    after = MAX
  end
  local cap = COUNT_CAP
  if count > cap then
    cap = count
  end
  if after > cap then
    after = cap
  end
  rem = 0
  if allowed then
    rem = limit - after
  end
end

local first = 0
if allowed then
  first = 1
elseif mode < 2 then
  -- rejected and not charged anyway
  return { now, 0, 0, until_end, 0, 0 }
end
if hits > 0 then
  local ttl = math.ceil((e - now) / 1000)
  if ttl < 1 then
    ttl = 1
  end
  redis.call('SET', KEYS[1], string.format('%.0f %.0f', start, after), 'PX',
    string.format('%.0f', ttl + GRACE_MS))
  return { now, first, rem, until_end, 1, first }
end
return { now, first, rem, until_end, 0, first }
