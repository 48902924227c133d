-- Floor for sliding_log: a sorted set of timestamps (seed 002). Drop what left the window,
-- count, add. ARGV: window (us), limit.
local window = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local t = redis.call("time")
local now = t[1] * 1000000 + t[2]
redis.call("zremrangebyscore", KEYS[1], "-inf", now - window)
if redis.call("zcard", KEYS[1]) >= limit then return 0 end
redis.call("zadd", KEYS[1], now, now)
redis.call("pexpire", KEYS[1], math.ceil(window / 1000))
return 1
