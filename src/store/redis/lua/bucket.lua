-- sluice: the meter token_bucket, leaky_bucket and gcra share (src/algorithm/bucket.rs): its
-- port, and the entry point of a request of one check of any of the three.
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

-- The port (algorithm.lua: read, evaluate, write); state { at, level }.
local function new_bucket()
  local bucket = {}
  bucket.read = function(key) return read_string(bucket, key) end
  bucket.write = function(key, st, ttl) write_string(bucket, key, st, ttl) end
  bucket.decode = pair
  bucket.encode = encode_pair

  function bucket.evaluate(c, st, f, hits, refund)
    local now = f.now
    if c.limit == 0 then
      -- requests_per_unit 0: nothing passes but looks and refunds, and nothing is kept.
      return { allowed = hits == 0 or refund, remaining = 0, reset = 0, debt_reset = 0,
        state = { now, 0 }, expires_at = now }
    end
    local w = max(c.window, 1)
    local g = bucket_gcd(w, c.limit)
    -- g divides both: these quotients are exact.
    local hit, drain, burst = w / g, c.limit / g, c.param
    local cap = burst * hit
    local at, level = now, 0
    if st ~= nil and st[1] >= now then
      at, level = st[1], st[2]
    elseif st ~= nil then
      local dt = now - st[1]
      if dt <= fdiv(st[2], drain) then
        level = st[2] - dt * drain
      end
    end
    -- Times are computed from `at`; when the clock is behind it, the difference is added.
    local skew = at - now
    local lvl, allowed = nil, true
    if refund then
      lvl = 0
      if hits <= fdiv(level, hit) then
        lvl = level - hits * hit
      end
    elseif hits <= burst and level + hits * hit <= cap then
      lvl = level + hits * hit
    end
    local remaining, reset, debt_reset = 0, 0, 0
    if lvl ~= nil then
      reset = bucket_until(lvl, 0, drain)
      debt_reset = reset
      remaining = fdiv(max(cap - lvl, 0), hit)
    else
      -- Rejected: the wait until the level leaves room for `hits` (or empties, when they
      -- exceed the burst); charged anyway, into debt, up to twice the bucket.
      allowed = false
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
      reset = bucket_until(level, target, drain)
      debt_reset = bucket_until(lvl, target, drain)
    end
    return { allowed = allowed, remaining = remaining, reset = skew + reset,
      debt_reset = skew + debt_reset, state = { at, lvl },
      expires_at = at + bucket_until(lvl, 0, drain) }
  end
  return bucket
end

-- A request of one token_bucket, leaky_bucket or gcra check (no dry run): this function of
-- the key, now and its values as sent (text: limit, window (us, >= 1), hits, flags, burst),
-- answering flags (1 allowed + 2 charged), remaining and reset, as `alone` (alone.lua) over
-- the port would, on the same state, leaving the same state and expiry. Still the port's
-- arithmetic written out a second time (the parity tests hold the two together): `alone`
-- over `new_bucket()` costs about 25% more Lua time per call, its tables and calls.
-- On the allowed path, fdiv and cdiv (division.lua) are written out in place: in an A/B
-- through the server (6 rounds) the calls cost gcra about 5% more Redis CPU per decision, and
-- gcra is near its target of 1.5x its floor.
local function bucket(key, now, a2, a3, a4, a5, a6)
  local floor = math.floor

  -- `s - 0` is tonumber(s) without a call: the same conversion, and -0 stays -0.
  local limit = a2 - 0
  local w = a3 - 0
  -- One hit and mode 0 are the commonest: a compare of interned strings, not a conversion.
  local hits = a4 == '1' and 1 or a4 - 0
  local mode = a5 == '0' and 0 or a5 - 0
  local burst = a6 - 0

  -- Read even when unused (limit 0): the port does, and so fails alike on a key of another
  -- type.
  local raw = redis.call('GET', key)

  if limit == 0 then
    -- requests_per_unit 0: only looks and refunds pass; a charge writes 'now 0', expired.
    if hits == 0 then
      return 1, 0, 0
    end
    local flags = 2
    if has(mode, FLAG_REFUND) then
      flags = 3
    elseif not has(mode, FLAG_ALWAYS) then
      return 0, 0, 0
    end
    redis.call('SET', key, string.format('%.0f 0', now), 'PX', 1 + GRACE_MS)
    return flags, 0, 0
  end

  if w < 1 then
    w = 1
  end
  -- gcd(w, limit), which divides both: the quotients are exact. For integers 0 <= g < 2^52
  -- and b > 0, g % b (g - floor(g / b) * b) is exact, the same as the port's fmod, and
  -- cheaper than a call.
  local g, b = w, limit
  while b ~= 0 do
    if g >= 0 and g < 4503599627370496 and b > 0 then
      g, b = b, g % b
    else
      g, b = b, math.fmod(g, b)
    end
  end
  local hit, drain = w / g, limit / g
  local cap = burst * hit

  -- The stored state, drained to now; undecodable (the port's `pair` gives nil) reads as
  -- absent. The canonical 'at level' is tried first: when it matches, `pair`'s pattern captures
  -- the same.
  local at, level = now, 0
  if raw then
    local sa, sl = string.match(raw, '^(%-?%d+) (%d+)$')
    if sa == nil then
      sa, sl = string.match(raw, '^%s*(%-?%d+)%s+(%-?%d+)%s*$')
    end
    if sa ~= nil then
      sl = sl - 0
      if sl >= 0 then
        sa = sa - 0
        if sa >= now then
          at, level = sa, sl
        else
          local dt = now - sa
          local q = floor(sl / drain) -- fdiv(sl, drain)
          if q * drain > sl then
            q = q - 1
          elseif (q + 1) * drain <= sl then
            q = q + 1
          end
          if dt <= q then
            level = sl - dt * drain
          end
        end
      end
    end
  end
  local skew = at - now

  -- The new level `lvl`, the waits until it drains to 0 (`empty`: the expiry) and to the
  -- reset's target (`reset`), each the port's until_level: ceil((lvl - target) / drain), 0
  -- at or below it. Comparisons are written as the port's max and min make them, so that a
  -- stored '-0' gives the same text back.
  local lvl, flags, rem, reset, empty = nil, 0, 0, 0, 0
  if has(mode, FLAG_REFUND) then
    -- refund: give back `hits`; more than the level empties the bucket
    lvl = 0
    if hits <= fdiv(level, hit) then
      lvl = level - hits * hit
    end
  elseif hits <= burst and level + hits * hit <= cap then
    lvl = level + hits * hit
  end

  if lvl ~= nil then
    -- Allowed: the reset is until the bucket empties.
    if not (lvl <= 0) then
      empty = floor(lvl / drain) -- cdiv(lvl, drain)
      if empty * drain > lvl then
        empty = empty - 1
      elseif (empty + 1) * drain <= lvl then
        empty = empty + 1
      end
      if empty * drain < lvl then
        empty = empty + 1
      end
    end
    reset = empty
    rem = cap - lvl
    if not (rem > 0) then
      rem = 0
    end
    local q = floor(rem / hit) -- fdiv(rem, hit)
    if q * hit > rem then
      q = q - 1
    elseif (q + 1) * hit <= rem then
      q = q + 1
    end
    rem = q
    if hits == 0 then
      return 1, rem, skew + reset
    end
    flags = 3
  else
    -- Rejected: the reset is until the level (the debt's, when charged) leaves room for
    -- `hits`, or empties when they exceed the burst.
    lvl = level
    local charged = has(mode, FLAG_ALWAYS) and hits > 0
    if charged then
      -- Charged anyway: into debt, up to twice the bucket and never below the level.
      local debt_cap = 2 * cap
      lvl = debt_cap
      if hits <= 2 * burst then
        lvl = level + hits * hit
        if not (lvl < debt_cap) then
          lvl = debt_cap
        end
      end
      if not (lvl > level) then
        lvl = level
      end
    end
    local target = 0
    if not (hits > burst) then
      target = cap - hits * hit
    end
    if not (lvl <= target) then
      local a = lvl - target
      reset = cdiv(a, drain)
    end
    if not charged then
      return 0, 0, skew + reset
    end
    if not (lvl <= 0) then
      empty = cdiv(lvl, drain)
    end
    flags = 2
  end

  -- Charged: the port's write. Its text is '%.0f %.0f'; '%d' prints the same digits for
  -- integers in (0, 2^53), every real state, at half the cost.
  local text
  if at > 0 and at < MAX and at % 1 == 0 and lvl > 0 and lvl < MAX and lvl % 1 == 0 then
    text = string.format('%d %d', at, lvl)
  else
    text = string.format('%.0f %.0f', at, lvl)
  end
  redis.call('SET', key, text, 'PX', ttl_ms(at + empty - now))
  return flags, rem, skew + reset
end

