-- sluice: sliding_log (src/algorithm/sliding_log.rs) on a sorted set, O(log n) of the entries
-- in every path: its port (`log_*`, and `new_sliding_log` for batch.lua) and the entry point of
-- a request of one sliding_log check (`sliding_log`, which batch.lua's short layout also calls
-- for a sliding_log beside fixed windows).
--
-- State (layout v2): a sorted set, one member per admitted hit, scored by its time (us); the
-- member is the time and a 10-digit sequence number among the entries of that time, so
-- members are unique and sort like the log (ALGORITHMS.md, "Sliding log"). Entries at or
-- before now - window have left the log; they are removed when the key is written (a
-- rejected, uncharged call writes nothing: a clock that steps back still sees them, as the
-- Rust state does).

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

-- The log as the batch policy's state (batch.lua's checks), O(log n) like the function
-- below: the stored set S is read by counts and ranks, never walked. A state is a view of S
-- after this call's evaluations: S's entries at or before now of ranks [alo, ahi), then k
-- entries at now (charged by this call), then S's entries after now (a clock stepped back) of
-- ranks [blo, bhi). That is every state the Rust evaluation makes from S at one instant: a
-- charge adds its entries at now after every entry at or before now and keeps the newest n,
-- a refund drops the newest, time drops the oldest. Views are never changed in place (one may
-- be another check's input). Writes wait for `log_flush`, so that every view's ranks are S's.
local log_pending, log_pending_keys = {}, {}

-- The state of `key`, or nil when it holds no entry.
local function log_read(key)
  local total = redis.call('ZCARD', key)
  if total == 0 then
    return nil
  end
  return { s = { key = key, total = total, dead = {} }, fresh = true }
end

local function log_score(s, rank)
  return tonumber(redis.call('ZRANGE', s.key, rank, rank, 'WITHSCORES')[2])
end

-- `st` (a state read, charged or nil) as a view at `now`, copied.
local function log_view(st, now)
  if st == nil then
    return { s = nil, alo = 0, ahi = 0, k = 0, blo = 0, bhi = 0 }
  end
  local s = st.s
  if st.fresh then
    if s.p == nil then
      s.p = s.total - redis.call('ZCOUNT', s.key, '(' .. string.format('%.0f', now), '+inf')
    end
    return { s = s, alo = 0, ahi = s.p, k = 0, blo = s.p, bhi = s.total }
  end
  return { s = s, alo = st.alo, ahi = st.ahi, k = st.k, blo = st.blo, bhi = st.bhi }
end

local function log_len(v)
  return (v.ahi - v.alo) + v.k + (v.bhi - v.blo)
end

-- The time of the view's i-th entry (1 = oldest).
local function log_at(v, now, i)
  local a = v.ahi - v.alo
  if i <= a then
    return log_score(v.s, v.alo + i - 1)
  end
  if i <= a + v.k then
    return now
  end
  return log_score(v.s, v.blo + i - a - v.k - 1)
end

local function log_drop_oldest(v, x)
  local a = math.min(x, v.ahi - v.alo)
  v.alo, x = v.alo + a, x - a
  local k = math.min(x, v.k)
  v.k, x = v.k - k, x - k
  v.blo = v.blo + math.min(x, v.bhi - v.blo)
end

local function log_drop_newest(v, x)
  local b = math.min(x, v.bhi - v.blo)
  v.bhi, x = v.bhi - b, x - b
  local k = math.min(x, v.k)
  v.k, x = v.k - k, x - k
  v.ahi = v.ahi - math.min(x, v.ahi - v.alo)
end

-- Until the view's newest entry leaves the window (0 when it is empty).
local function log_until_empty(v, now, window)
  local len = log_len(v)
  if len == 0 then
    return 0
  end
  return math.max(log_at(v, now, len) + window - now, 0)
end

-- Until `hits` more would fit in the view, of `n` (src/algorithm/sliding_log.rs `retry`).
local function log_retry(v, now, window, n, hits)
  if hits > n then
    return log_until_empty(v, now, window)
  end
  local m = log_len(v) + hits - n
  if m <= 0 then
    return 0
  end
  return math.max(log_at(v, now, m) + window - now, 0)
end

-- src/algorithm/sliding_log.rs `evaluate` on a view: the Outcome of algorithm.lua.
local function log_evaluate(st, now, window, n, hits, refund)
  local v = log_view(st, now)
  if v.s ~= nil then
    -- The entries at or before now - window have left: S's oldest, so A's front.
    local cut = now - window
    local d = v.s.dead[cut]
    if d == nil then
      d = redis.call('ZCOUNT', v.s.key, '-inf', string.format('%.0f', cut))
      v.s.dead[cut] = d
    end
    if d > v.alo then
      v.alo = math.min(d, v.ahi)
    end
  end
  if refund then
    log_drop_newest(v, hits)
    local reset = log_until_empty(v, now, window)
    return { allowed = true, remaining = math.max(n - log_len(v), 0), reset = reset,
      debt_reset = reset, state = v, expires_at = now + reset }
  end
  local allowed = hits <= n and log_len(v) + hits <= n
  local uncharged = 0
  if not allowed then
    uncharged = log_retry(v, now, window, n, hits)
  end
  -- Charged: min(hits, n) entries at now, then only the newest n kept.
  local kept = log_view(v, now)
  kept.k = kept.k + math.min(hits, n)
  log_drop_oldest(kept, math.max(log_len(kept) - n, 0))
  local u = log_until_empty(kept, now, window)
  local o = { allowed = allowed, remaining = 0, reset = u, debt_reset = u, state = kept,
    expires_at = now + u }
  if allowed then
    o.remaining = n - log_len(kept)
  else
    o.reset = uncharged
    o.debt_reset = log_retry(kept, now, window, n, hits)
  end
  return o
end

-- The sequence number after the last member at `at` (text) in `key`: new entries at a time
-- follow those already there (members sort by time, then sequence).
local function log_next_seq(key, at)
  local last = redis.call('ZRANGE', key, at, at, 'BYSCORE', 'REV', 'LIMIT', 0, 1)
  if last[1] == nil then
    return 0
  end
  return tonumber(string.sub(last[1], -10)) + 1
end

-- Adds `count` entries at `at` (text) from sequence number `seq`, in chunks: unpack has a
-- stack limit.
local function log_add(key, at, seq, count)
  local j = 0
  while j < count do
    local args = { 'ZADD', key }
    local stop = math.min(j + 500, count)
    for i = j, stop - 1 do
      args[#args + 1] = at
      args[#args + 1] = at .. ':' .. string.format('%010d', seq + i)
    end
    redis.call(unpack(args))
    j = stop
  end
end

-- Keeps `v` as `key`'s state with an expiry of `ms`, when the call flushes.
local function log_write(key, v, ms)
  if log_pending[key] == nil then
    log_pending_keys[#log_pending_keys + 1] = key
  end
  log_pending[key] = { v = v, ms = ms }
end

-- Writes the views kept: S's ranks outside them removed (highest first, so the lower ones
-- stand), then the entries at now.
local function log_flush(now)
  for _, key in ipairs(log_pending_keys) do
    local p = log_pending[key]
    local v, s = p.v, p.v.s
    if s ~= nil then
      if v.bhi < s.total then
        redis.call('ZREMRANGEBYRANK', key, v.bhi, s.total - 1)
      end
      if v.ahi < v.blo then
        redis.call('ZREMRANGEBYRANK', key, v.ahi, v.blo - 1)
      end
      if v.alo > 0 then
        redis.call('ZREMRANGEBYRANK', key, 0, v.alo - 1)
      end
    end
    if v.k > 0 then
      local at = string.format('%.0f', now)
      log_add(key, at, log_next_seq(key, at), v.k)
    end
    if log_len(v) == 0 then
      redis.call('DEL', key)
    else
      redis.call('PEXPIRE', key, p.ms)
    end
  end
  log_pending, log_pending_keys = {}, {}
end

-- The port (algorithm.lua: read, evaluate, write); state: a view of the stored sorted set, decided
-- in O(log n) of its entries (`log_evaluate`).
local function new_sliding_log()
  local sliding_log = {}
  sliding_log.read = log_read
  function sliding_log.write(key, v, ms)
    log_write(key, v, ms)
  end
  function sliding_log.evaluate(c, st, f, hits, refund)
    return log_evaluate(st, f.now, c.window, c.limit, hits, refund)
  end
  return sliding_log
end

-- The texts of the last call's now, its cut (now - window) and the first member at now. In
-- the library these outlive the call, and a batch decides at one instant, mostly for one
-- window: the compares save Redis formatting the numbers on every decision.
local last_now, last_at, last_first, last_window, last_cut = nil, nil, nil, nil, nil

-- A request of one sliding_log check (no dry run): this function of the key, now and its
-- values as sent (text: limit, window (us, >= 1), hits, flags), answering flags (1 allowed + 2
-- charged), remaining and reset, as `alone` (alone.lua). It works on the sorted set directly
-- rather than through the views `log_evaluate` keeps for several checks of one key.
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

  if has(mode, FLAG_REFUND) then
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
    if not has(mode, FLAG_ALWAYS) or hits == 0 then
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

