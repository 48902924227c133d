-- sluice: the commonest request's decision alone: one fixed_window check of a whole request
-- (one descriptor, one limit, epoch-aligned window). The same decision as decide.lua gives
-- such a request, on the same state, without decide.lua's per-call setup. Written by
-- src/store/redis/script.rs:
--
--   KEYS[1]   the key
--   ARGV[1]   now in microseconds, or '' to read the Redis clock (TIME)
--   ARGV[2]   limit      ARGV[3] window (us, >= 1)      ARGV[4] hits
--   ARGV[5]   flags: 0, or FLAG_REFUND + FLAG_ALWAYS (expiry.lua)
--
-- State (layout v2, shared with decide.lua): a hash of one field, the window's start (us),
-- holding the count plus one (so that a count given back to 0 still marks its window, and
-- HINCRBY on an absent field tells itself apart by its result). A later window replaces an
-- earlier one, whose field stays as a mark (SUPERSEDED, expiry.lua); the key expires
-- GRACE_MS (expiry.lua) after its window's end.
--
-- Reply: { now, flags (1 allowed + 2 charged), remaining, reset (us) }.

local MAX = 9007199254740991 -- 2^53 - 1
local COUNT_CAP = 4503599627370496 -- 2^52 (src/algorithm/mod.rs COUNT_CAP)

-- The last window start the common case charged, and its field text. In the library these
-- outlive the call, and most calls fall in the window of the one before: the compare saves
-- Redis formatting the number on every HINCRBY.
local last_ws, last_field = nil, nil

-- In the library, a function that keeps each decision's converted values for the batch's
-- repeats of it (fixed_window_again.lua sets it); nil in a script.
local keep = nil

-- The decision is this function of the key, now and ARGV[2..6] as given (text), answering
-- flags, remaining and reset: the library's batch calls it with a decision's values in place;
-- as a script (EVALSHA, or the library's function of it) script.rs's `fast_main` follows it,
-- which reads now and answers { now, flags, remaining, reset }. A repeat in the library's
-- batch (fixed_window_again.lua) passes the values already converted after them (limit,
-- hits, mode, ws, we), so none is read again: one function, so that a script makes no more
-- closures per call than it did.
local function fixed_window(key, now, a2, a3, a4, a5, a6, limit, hits, mode, ws, we)
  if limit == nil then
    limit = tonumber(a2)
    local w = tonumber(a3)
    -- One hit and mode 0 are the commonest: a compare of interned strings, not a conversion.
    hits = a4 == '1' and 1 or tonumber(a4)
    mode = a5 == '0' and 0 or tonumber(a5)

    -- The epoch-aligned window of now (fmod is exact; made Euclidean before the epoch).
    local r = math.fmod(now, w)
    if r < 0 then
      r = r + w
    end
    ws = now - r
    we = ws + w
    if we > MAX then
      we = MAX
    end
    if keep ~= nil then
      keep(now, a4, limit, hits, mode, ws, we)
    end
  end

  -- The common case, a take in the window the key already counts: one command. Numbers reach
  -- Redis as '%.17g', exact below 2^53, so the field is the same text decide.lua writes.
  if mode == 0 and hits > 0 then
    if ws ~= last_ws then
      last_ws, last_field = ws, string.format('%.17g', ws)
    end
    -- hits as its text: Redis would format the number back into it.
    local c = redis.call('HINCRBY', key, last_field, a4)
    if c > hits then
      local after = c - 1
      if after <= limit and after <= COUNT_CAP then
        return 3, limit - after, we - now
      end
      -- Rejected, or past the cap (the general path below saturates; a superseded window's
      -- mark is past it too): give it back.
      redis.call('HINCRBY', key, last_field, -hits)
      if after > limit and after <= COUNT_CAP then
        return 0, 0, we - now
      end
    elseif c == hits then
      -- The field was absent: a new key, or one that holds another window. With nothing
      -- else, or an earlier window only, the take starts our window from 0: what the general
      -- path below would store, in two commands fewer (the first take of every window).
      local f = redis.call('HGETALL', key)
      local other = nil
      if f[3] == nil then
        other = false
      elseif f[5] == nil then
        local o, v = 1, 2
        if f[1] == last_field then
          o, v = 3, 4
        end
        local s, n = tonumber(f[o]), tonumber(f[v])
        if s == nil or n == nil or n < 1 or s < ws then
          other = f[o]
        end
      end
      if other ~= nil and hits <= limit and hits <= COUNT_CAP then
        redis.call('HINCRBY', key, last_field, 1)
        if other then
          supersede(key, other)
        end
        expire(key, we - now)
        return 3, limit - hits, we - now
      end
      -- A later window (a clock behind), or a take that does not fit: the general path.
      redis.call('HDEL', key, last_field)
    end
  end

  -- Everything else, as decide.lua's fixed_window: read the stored window; a later one than
  -- ours wins.
  local start, e, count, stored = ws, we, 0, nil
  local f = redis.call('HGETALL', key)
  if f[1] ~= nil then
    local s, v = tonumber(f[1]), tonumber(f[2])
    if s ~= nil and v ~= nil and v >= 1 and v <= COUNT_CAP + 1 then
      stored = s
      if s >= ws then
        if s ~= ws then
          start, e = s, s + (we - ws)
          if e > MAX then
            e = MAX
          end
        end
        count = v - 1
      end
    end
  end
  local until_end = e - now
  if until_end < 0 then
    until_end = 0
  end

  local allowed, after, rem
  if has(mode, FLAG_REFUND) then
    -- refund
    allowed = true
    after = count - hits
    if after < 0 then
      after = 0
    end
    rem = limit - after
    if rem < 0 then
      rem = 0
    end
  else
    allowed = count + hits <= limit
    after = count + hits
    if after > MAX then
      after = MAX
    end
    local cap = COUNT_CAP
    if count > cap then
      cap = count
    end
    if after > cap then
      after = cap
    end
    rem = 0
    if allowed then
      rem = limit - after
    end
  end

  local flags = 0
  if allowed then
    flags = 1
  elseif not has(mode, FLAG_ALWAYS) then
    -- rejected and not charged anyway
    return 0, 0, until_end
  end
  if hits > 0 then
    if stored ~= start then
      redis.call('DEL', key)
      redis.call('HSET', key, start, after + 1)
      if stored ~= nil and stored < start then
        redis.call('HSET', key, string.format('%.17g', stored), SUPERSEDED)
      end
      expire(key, e - now)
    else
      redis.call('HSET', key, start, after + 1)
    end
    flags = flags + 2
  end
  return flags, rem, until_end
end
