-- sluice: what the algorithms' ports share (src/algorithm/mod.rs): integer bounds and
-- saturating arithmetic, the text of integers, the window of a frame, and the string state
-- most of them keep. script/mod.rs puts this file after expiry.lua and division.lua and before
-- every algorithm's file.
--
-- Every number is an integer below 2^53, so Lua's doubles agree with Rust's integers bit for
-- bit. Each algorithm's file defines `new_<name>()`, which makes its port once per library
-- (once per call in a script): `read(key)` its stored state, `evaluate(c, st, f, hits, refund)`
-- exactly as its Rust twin (c: { limit, window, param, value }; f: the frame { now, wstart,
-- wend }), `write(key, st, ms, read)` the charged state with the key's expiry in ms. Outcome:
-- { allowed, remaining, reset, debt_reset, state, expires_at } as Rust's `Outcome`. States are
-- never modified in place: an outcome's state may be another check's input (the same key twice
-- in one request).

local MAX = 9007199254740991 -- 2^53 - 1: Rust saturates at u64/i64 bounds, Lua here
local COUNT_CAP = 4503599627370496 -- 2^52 (src/algorithm/mod.rs COUNT_CAP)

local function add(a, b)
  local s = a + b
  if s > MAX then
    return MAX
  end
  return s
end

local function max(a, b)
  if a > b then
    return a
  end
  return b
end

local function min(a, b)
  if a < b then
    return a
  end
  return b
end

local function num(s)
  if s == nil or s == '' then
    return nil
  end
  return tonumber(s)
end

-- Integers print exactly (tostring keeps only 14 digits).
local function int(n)
  return string.format('%.0f', n)
end

-- The two decimal integers of `raw` separated by spaces, the second not negative, as two
-- values, or nil if it holds anything else (what `ints` accepts with two values, without its
-- iterator and table of tokens: this is the state of the commonest algorithms).
local function pair_of(raw)
  -- The text `pair_text` writes first: when it matches, the general pattern captures the same.
  local a, b = string.match(raw, '^(%-?%d+) (%d+)$')
  if a == nil then
    a, b = string.match(raw, '^%s*(%-?%d+)%s+(%-?%d+)%s*$')
    if a == nil then
      return nil
    end
  end
  -- `s - 0` is tonumber(s) without a call: the same conversion, and -0 stays -0.
  b = b - 0
  if b < 0 then
    return nil
  end
  return a - 0, b
end

-- `pair_of` as a state table.
local function pair(raw)
  local a, b = pair_of(raw)
  if a == nil then
    return nil
  end
  return { a, b }
end

-- The decimal integers of `raw` separated by spaces, or nil if it holds anything else.
local function ints(raw)
  local out = {}
  for tok in string.gmatch(raw, '%S+') do
    if string.find(tok, '^%-?%d+$') == nil then
      return nil
    end
    out[#out + 1] = tonumber(tok)
  end
  if #out == 0 then
    return nil
  end
  return out
end

-- The window a windowed state counts in: its own if it is from a later window (another
-- instance's clock runs ahead), else the frame's. Returns start, end, until the end.
local function window_of(st_start, f)
  local start = f.wstart
  if st_start ~= nil and st_start >= f.wstart then
    start = st_start
  end
  local e
  if start == f.wstart then
    e = f.wend
  else
    e = add(start, f.wend - f.wstart)
  end
  return start, e, max(e - f.now, 0)
end

-- The epoch-aligned window of `now` for a window of `w` us (src/algorithm/mod.rs
-- `Frame::epoch_aligned`): its start and end. fmod is exact; made Euclidean for times before
-- the epoch.
local function epoch_window(now, w)
  if w < 1 then
    w = 1
  end
  local r = math.fmod(now, w)
  if r < 0 then
    r = r + w
  end
  return now - r, add(now - r, w)
end

-- The state of the buckets as text: two integers.
local function pair_text(a, b)
  -- '%d' prints the digits '%.0f' does for integers in (0, 2^53), every real state, at half
  -- the cost.
  if a > 0 and a < MAX and a % 1 == 0 and b > 0 and b < MAX and b % 1 == 0 then
    return string.format('%d %d', a, b)
  end
  return string.format('%.0f %.0f', a, b)
end

local function encode_pair(st)
  return pair_text(st[1], st[2])
end

-- The string state of most algorithms: GET, and SET with an expiry.
local function read_string(a, key)
  local raw = redis.call('GET', key)
  if raw then
    return a.decode(raw)
  end
  return nil
end

local function write_string(a, key, st, ms)
  redis.call('SET', key, a.encode(st), 'PX', ms)
end
