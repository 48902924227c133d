-- Floor for sliding_window: two counters, this window's and the previous one's, the
-- previous weighted by how much of it still overlaps. ARGV: window (us), limit.
local window = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local t = redis.call("time")
local now = t[1] * 1000000 + t[2]
local idx = math.floor(now / window)
local cur_key = KEYS[1] .. ":" .. idx
local prev = tonumber(redis.call("get", KEYS[1] .. ":" .. (idx - 1))) or 0
local cur = tonumber(redis.call("get", cur_key)) or 0
local weight = 1 - (now - idx * window) / window
if prev * weight + cur + 1 > limit then return 0 end
redis.call("incr", cur_key)
redis.call("pexpire", cur_key, math.ceil(2 * window / 1000))
return 1
