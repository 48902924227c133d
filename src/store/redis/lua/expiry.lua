-- sluice: how long a key outlives what it counts, for every script that writes state
-- (src/store/redis/script/mod.rs puts this file first), and the bits of a check's
-- flags.

-- A check's boolean options travel as one integer of these bits (script/mod.rs `flags`, the same
-- names), so a new option adds a bit, not an argument.
local FLAG_REFUND, FLAG_ALWAYS, FLAG_DRY_RUN, FLAG_QUOTA = 1, 2, 4, 8

-- Whether `flags` has `bit` (`band` a local set on first use: division.lua says why).
local band = nil
local function has(flags, bit_)
  if band == nil then
    band = bit.band
  end
  return band(flags, bit_) ~= 0
end

-- Stored state lives this much past its expiry: a sluice whose clock runs behind the one that
-- wrote it must still see it (losing it early would grant quota).
local GRACE_MS = 1000

-- The expiry (ms) of a key whose state counts until `left` (us) from now: `left` in whole ms,
-- at least 1, and GRACE_MS past it.
local ceil = nil
local function ttl_ms(left)
  if ceil == nil then
    ceil = math.ceil
  end
  local ttl = ceil(left / 1000)
  if ttl < 1 then
    ttl = 1
  end
  return ttl + GRACE_MS
end

-- Sets that expiry on `key`.
local function expire(key, left)
  redis.call('PEXPIRE', key, ttl_ms(left))
end

-- fixed_window: a window replaced by a later one (an instance whose clock runs ahead, a Redis
-- clock stepped back) keeps its field, set to this mark, after the later window's field, so a
-- take still counting in it (a plain take, plain.rs: `HINCRBY key <start> 1`) finds a value
-- no count reaches (counts stay at most COUNT_CAP + 1) and is decided by the script instead;
-- had the field been deleted, the take would make a fresh one and its successors count on it
-- beside the later window. Readers skip the mark (a field's value above COUNT_CAP + 1).
local SUPERSEDED = 9007199254740992 -- 2^53

-- Marks `field` of fixed_window `key` superseded (moved after the other fields: readers take
-- the first field as the window).
local function supersede(key, field)
  redis.call('HDEL', key, field)
  redis.call('HSET', key, field, SUPERSEDED)
end
