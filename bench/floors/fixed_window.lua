-- Floor for fixed_window: the seeds' script (seed 003), verbatim. GET, compare, INCR,
-- PEXPIRE on the first hit. ARGV: window (ms), limit.
local window = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local counter = tonumber(redis.call("get", KEYS[1]))
if counter == nil then counter = 0 end
if counter >= limit then return 0 end
redis.call("incr", KEYS[1])
if counter == 0 then redis.call("pexpire", KEYS[1], window) end
return 1
