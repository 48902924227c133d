-- Floor for token_bucket: a hash of level (tokens) and time. ARGV: capacity, refill per us.
local cap = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local t = redis.call("time")
local now = t[1] * 1000000 + t[2]
local v = redis.call("hmget", KEYS[1], "tokens", "ts")
local tokens = tonumber(v[1]) or cap
local ts = tonumber(v[2]) or now
tokens = math.min(cap, tokens + (now - ts) * rate)
if tokens < 1 then return 0 end
redis.call("hset", KEYS[1], "tokens", tokens - 1, "ts", now)
redis.call("pexpire", KEYS[1], math.ceil(cap / rate / 1000))
return 1
