-- sluice: how long a fast path's key outlives what it counts, for fixed_window.lua and
-- sliding_log.lua (src/store/redis/script.rs puts this file before each of them).

local GRACE_MS = 1000 -- as decide.lua: state outlives what it counts by this much

-- The key lives GRACE_MS past `left` (us) from now, counted in whole ms, at least 1.
local function expire(key, left)
  local ttl = math.ceil(left / 1000)
  if ttl < 1 then
    ttl = 1
  end
  redis.call('PEXPIRE', key, ttl + GRACE_MS)
end
