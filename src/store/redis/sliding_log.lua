-- sluice: one sliding_log check of a whole request, decided on a sorted set in O(log n) of the
-- entries (decide.lua's port walks the whole log). The same decision as decide.lua gives such
-- a request, on the same state. Written by src/store/redis/script.rs:
--
--   KEYS[1]   the key
--   ARGV[1]   now in microseconds, or '' to read the Redis clock (TIME)
--   ARGV[2]   limit      ARGV[3] window (us, >= 1)      ARGV[4] hits
--   ARGV[5]   mode: 0, or 1 refund + 2 charge always
--
-- State (layout v2, shared with decide.lua): a sorted set, one member per admitted hit, scored
-- by its time (us); the member is the time and a 10-digit sequence number among the entries
-- of that time, so members are unique and sort like the log (ALGORITHMS.md, "Sliding log").
-- Entries at or before now - window have left the log; they are removed when the key is
-- written (a rejected, uncharged call writes nothing: a clock that steps back still sees them,
-- as the Rust state does).
--
-- Reply: { now, flags (1 allowed + 2 charged), remaining, reset (us) }.

-- The time of the i-th live entry (1 = oldest), given how many dead ones precede them.
local function live_at(key, dead, i)
  local e = redis.call('ZRANGE', key, dead + i - 1, dead + i - 1, 'WITHSCORES')
  return tonumber(e[2])
end

-- Until the newest live entry leaves the window (0 when none is live).
local function until_empty(key, now, window, count)
  if count == 0 then
    return 0
  end
  local e = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  local r = tonumber(e[2]) + window - now
  if r < 0 then
    return 0
  end
  return r
end

-- Until `hits` more would fit among `count` live entries after `dead` dead ones, of `n`.
local function retry(key, now, window, n, hits, dead, count)
  if hits > n then
    return until_empty(key, now, window, count)
  end
  local m = count + hits - n
  if m <= 0 then
    return 0
  end
  local r = live_at(key, dead, m) + window - now
  if r < 0 then
    return 0
  end
  return r
end

-- The texts of the last call's now, its cut (now - window) and the first member at now. In
-- the library these outlive the call, and a batch decides at one instant, mostly for one
-- window: the compares save Redis formatting the numbers on every decision.
local last_now, last_at, last_first, last_window, last_cut = nil, nil, nil, nil, nil

-- The decision is this function of the key, now and ARGV[2..6] as given (text), answering
-- flags, remaining and reset: the library's batch calls it with a decision's values in place;
-- as a script (EVALSHA, or the library's function of it) script.rs's `fast_main` follows it,
-- which reads now and answers { now, flags, remaining, reset }.
local function sliding_log(key, now, a2, a3, a4, a5, a6)
  local n = tonumber(a2)
  local window = tonumber(a3)
  -- One hit and mode 0 are the commonest: a compare of interned strings, not a conversion.
  local hits = a4 == '1' and 1 or tonumber(a4)
  local mode = a5 == '0' and 0 or tonumber(a5)
  if now ~= last_now then
    last_now, last_at, last_window = now, string.format('%.0f', now), nil
    last_first = last_at .. ':0000000000'
  end
  if window ~= last_window then
    last_window, last_cut = window, string.format('%.0f', now - window)
  end
  local cut = last_cut

  -- The live entries: those after `cut`. When even every entry, live or not, leaves room
  -- for a take, it is allowed, and the charge's clean-up below tells how many were dead:
  -- ZCARD is O(1) where ZCOUNT walks the entries.
  local total = redis.call('ZCARD', key)
  local len = total
  local counted = mode ~= 0 or hits == 0 or hits > n or len + hits > n
  if counted then
    len = redis.call('ZCOUNT', key, '(' .. cut, '+inf')
  end

  if mode % 2 == 1 then
    -- Refund: the newest `hits` entries go.
    if hits > 0 then
      redis.call('ZREMRANGEBYSCORE', key, '-inf', cut)
      if hits >= len then
        redis.call('DEL', key)
        len = 0
      else
        redis.call('ZREMRANGEBYRANK', key, -hits, -1)
        len = len - hits
      end
    end
    local reset = until_empty(key, now, window, len)
    local rem = n - len
    if rem < 0 then
      rem = 0
    end
    if hits > 0 then
      expire(key, reset)
      return 3, rem, reset
    end
    return 1, rem, reset
  end

  local allowed = hits <= n and len + hits <= n
  local uncharged = 0
  local dead = 0
  if not allowed then
    dead = total - len
    uncharged = retry(key, now, window, n, hits, dead, len)
    if mode < 2 or hits == 0 then
      -- Not charged: nothing is written.
      return 0, 0, uncharged
    end
  end
  if hits == 0 then
    local rem = n - len
    return 1, rem, until_empty(key, now, window, len)
  end

  -- Charge: min(hits, n) entries at now, after every entry at or before now, then only the
  -- newest n kept. The newest live entry tells where they go: before now (or none), they are
  -- the first at now; at now, they follow it; after now (a clock stepped back), the last
  -- entry at now is looked up.
  local removed = redis.call('ZREMRANGEBYSCORE', key, '-inf', cut)
  if not counted then
    len = len - removed
  end
  local at = last_at
  local seq = 0
  local newest = now
  local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if top[1] ~= nil then
    local score = tonumber(top[2])
    if score == now then
      seq = tonumber(string.sub(top[1], -10)) + 1
    elseif score > now then
      newest = score
      local last = redis.call('ZRANGE', key, at, at, 'BYSCORE', 'REV', 'LIMIT', 0, 1)
      if last[1] ~= nil then
        seq = tonumber(string.sub(last[1], -10)) + 1
      end
    end
  end
  local add = hits
  if add > n then
    add = n
  end
  local j = 0
  if add == 1 then
    -- The commonest: one entry, without a table of arguments.
    local member = last_first
    if seq ~= 0 then
      member = at .. ':' .. string.format('%010d', seq)
    end
    redis.call('ZADD', key, at, member)
    j = 1
  end
  -- In chunks: unpack has a stack limit.
  while j < add do
    local args = { 'ZADD', key }
    local stop = j + 500
    if stop > add then
      stop = add
    end
    for i = j, stop - 1 do
      args[#args + 1] = at
      args[#args + 1] = at .. ':' .. string.format('%010d', seq + i)
    end
    redis.call(unpack(args))
    j = stop
  end
  local kept = len + add
  if kept > n then
    redis.call('ZREMRANGEBYRANK', key, 0, kept - n - 1)
    kept = n
  end
  -- The newest entry is now or later, unless nothing was added (a limit of 0).
  local u
  if add > 0 then
    u = newest + window - now
  else
    u = until_empty(key, now, window, kept)
  end
  expire(key, u)
  if allowed then
    return 3, n - kept, u
  end
  -- Rejected but charged: it waits out its own debt (batch.rs `verdict`).
  return 2, 0, retry(key, now, window, n, hits, 0, kept)
end

