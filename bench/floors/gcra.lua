-- Floor for gcra, as the redis-cell ports do it: the theoretical arrival time (TAT, us) in one
-- integer key. ARGV: emission interval (us: window / limit), burst tolerance (us).
local emission = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local t = redis.call("time")
local now = t[1] * 1000000 + t[2]
local tat = tonumber(redis.call("get", KEYS[1]))
if tat == nil or tat < now then tat = now end
local new_tat = tat + emission
if new_tat - now > tolerance + emission then return 0 end
local ttl = math.ceil((new_tat - now) / 1000)
if ttl < 1 then ttl = 1 end
redis.call("set", KEYS[1], string.format("%.0f", new_tat), "px", ttl)
return 1
