-- Floor for leaky_bucket: a hash of level (water) and time. ARGV: capacity, leak per us.
local cap = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local t = redis.call("time")
local now = t[1] * 1000000 + t[2]
local v = redis.call("hmget", KEYS[1], "level", "ts")
local level = tonumber(v[1]) or 0
local ts = tonumber(v[2]) or now
level = math.max(0, level - (now - ts) * rate)
if level + 1 > cap then return 0 end
redis.call("hset", KEYS[1], "level", level + 1, "ts", now)
redis.call("pexpire", KEYS[1], math.ceil((level + 1) / rate / 1000))
return 1
