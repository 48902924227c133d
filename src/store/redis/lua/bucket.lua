-- sluice: the meter token_bucket, leaky_bucket and gcra share (src/algorithm/bucket.rs): its
-- evaluation written once (`bucket_meter`), the port batch.lua uses over it, and the entry
-- point of a request of one check of any of the three, the same evaluation without tables.
--
-- State: the string 'at level', in ticks. A hit weighs window / gcd(window, limit) ticks and
-- limit / gcd ticks drain per us, so every step is an exact integer. `at` is now, or the later
-- time of a write by an instance whose clock runs ahead (times are then computed from `at` and
-- the difference added). The key expires GRACE_MS (expiry.lua) after the bucket empties.

-- For integers 0 <= a < 2^52 and b > 0, a % b (a - floor(a / b) * b) is exact, the same as
-- fmod, and cheaper than a call.
local function bucket_gcd(a, b)
  while b ~= 0 do
    if a >= 0 and a < 4503599627370496 and b > 0 then
      a, b = b, a % b
    else
      a, b = b, math.fmod(a, b)
    end
  end
  return a
end

-- Until `level` drains to `target`, `drain` ticks per us.
local function bucket_until(level, target, drain)
  if level <= target then
    return 0
  end
  return cdiv(level - target, drain)
end

-- src/algorithm/bucket.rs `evaluate` on values, for the port and the lone entry point alike
-- (no table: a lone check pays for none): the stored state (at, level), nil when absent, ->
-- allowed, remaining, reset, debt_reset, and the state after charging (at, level) with its
-- expiry (algorithm.lua's Outcome, flat).
local function bucket_meter(limit, window, burst, sa, sl, now, hits, refund)
  if limit == 0 then
    -- requests_per_unit 0: nothing passes but looks and refunds, and nothing is kept.
    return hits == 0 or refund, 0, 0, 0, now, 0, now
  end
  local w = window
  if w < 1 then
    w = 1
  end
  local g = bucket_gcd(w, limit)
  -- g divides both: these quotients are exact.
  local hit, drain = w / g, limit / g
  local cap = burst * hit
  local at, level = now, 0
  if sa ~= nil and sa >= now then
    at, level = sa, sl
  elseif sa ~= nil then
    if now - sa <= fdiv(sl, drain) then
      level = sl - (now - sa) * drain
    end
  end
  -- Times are computed from `at`; when the clock is behind it, the difference is added.
  local skew = at - now
  local lvl = nil
  if refund then
    lvl = 0
    if hits <= fdiv(level, hit) then
      lvl = level - hits * hit
    end
  elseif hits <= burst and level + hits * hit <= cap then
    lvl = level + hits * hit
  end
  if lvl ~= nil then
    -- (bucket_until and max written out: the commonest call's path, a call each saved.)
    local reset, room = 0, cap - lvl
    if lvl > 0 then
      reset = cdiv(lvl, drain)
    end
    if not (room > 0) then
      room = 0
    end
    return true, fdiv(room, hit), skew + reset, skew + reset, at, lvl, at + reset
  end
  -- Rejected: the wait until the level leaves room for `hits` (or empties, when they exceed
  -- the burst); charged anyway, into debt, up to twice the bucket.
  local target = 0
  if hits <= burst then
    target = cap - hits * hit
  end
  local debt_cap = 2 * cap
  if hits > 2 * burst then
    lvl = max(debt_cap, level)
  else
    lvl = max(min(level + hits * hit, debt_cap), level)
  end
  return false, 0, skew + bucket_until(level, target, drain),
    skew + bucket_until(lvl, target, drain), at, lvl, at + bucket_until(lvl, 0, drain)
end

-- The port (algorithm.lua: read, evaluate, write); state { at, level }.
local function new_bucket()
  local bucket = {}
  bucket.read = function(key) return read_string(bucket, key) end
  bucket.write = function(key, st, ttl) write_string(bucket, key, st, ttl) end
  bucket.decode = pair
  bucket.encode = encode_pair

  function bucket.evaluate(c, st, f, hits, refund)
    local sa, sl = nil, nil
    if st ~= nil then
      sa, sl = st[1], st[2]
    end
    local allowed, rem, reset, debt_reset, at, lvl, e =
      bucket_meter(c.limit, c.window, c.param, sa, sl, f.now, hits, refund)
    return { allowed = allowed, remaining = rem, reset = reset, debt_reset = debt_reset,
      state = { at, lvl }, expires_at = e }
  end
  return bucket
end

-- A request of one token_bucket, leaky_bucket or gcra check (no dry run): this function of
-- the key, now and its values as sent (text: limit, window (us, >= 1), hits, flags, burst),
-- answering flags (1 allowed + 2 charged), remaining and reset: the port's read, evaluation
-- and write under the one-check policy (alone.lua), their values passed as they are.
local function bucket(key, now, a2, a3, a4, a5, a6)
  -- One hit and mode 0 are the commonest: a compare of interned strings, not a conversion.
  local hits = a4 == '1' and 1 or a4 - 0
  local mode = a5 == '0' and 0 or a5 - 0
  -- Read even when unused (limit 0), as the port does: a key of another type fails alike.
  local raw = redis.call('GET', key)
  local sa, sl = nil, nil
  if raw then
    sa, sl = pair_of(raw)
  end
  -- (`s - 0`: tonumber(s) without a call.)
  local allowed, rem, reset, debt_reset, at, lvl, e =
    bucket_meter(a2 - 0, a3 - 0, a6 - 0, sa, sl, now, hits, has(mode, FLAG_REFUND))
  local flags = alone_flags(allowed, hits, mode)
  if flags < 2 then
    return flags, rem, reset
  end
  redis.call('SET', key, pair_text(at, lvl), 'PX', ttl_ms(e - now))
  return flags, rem, debt_reset
end
