-- sluice: how long a key outlives what it counts, for every script that writes state
-- (src/store/redis/script.rs puts this file before each of them).

-- Stored state lives this much past its expiry: a sluice whose clock runs behind the one that
-- wrote it must still see it (losing it early would grant quota).
local GRACE_MS = 1000

-- The expiry (ms) of a key whose state counts until `left` (us) from now: `left` in whole ms,
-- at least 1, and GRACE_MS past it.
local function ttl_ms(left)
  local ttl = math.ceil(left / 1000)
  if ttl < 1 then
    ttl = 1
  end
  return ttl + GRACE_MS
end

-- Sets that expiry on `key`.
local function expire(key, left)
  redis.call('PEXPIRE', key, ttl_ms(left))
end
