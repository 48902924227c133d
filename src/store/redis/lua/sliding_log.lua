-- sluice: sliding_log (src/algorithm/sliding_log.rs) on a sorted set, O(log n) of the entries
-- in every path: its evaluation written once (`log_evaluate`, over views of the set), the port
-- batch.lua uses over it, and the entry point of a request of one sliding_log check
-- (`sliding_log`, the same evaluation under the one-check policy, which batch.lua's short
-- layout also calls for a sliding_log beside fixed windows).
--
-- State (layout v2): a sorted set, one member per admitted hit, scored by its time (us); the
-- member is the time and a 10-digit sequence number among the entries of that time, so
-- members are unique and sort like the log (ALGORITHMS.md, "Sliding log"). Entries at or
-- before now - window have left the log; they are removed when the key is written (a
-- rejected, uncharged call writes nothing: a clock that steps back still sees them, as the
-- Rust state does).
--
-- The log as a state, O(log n): the stored set S is read by counts and ranks, never walked. A
-- state is a view of S after this call's evaluations: S's entries at or before now of ranks
-- [alo, ahi), then k entries at now (charged by this call), then S's entries after now (a
-- clock stepped back) of ranks [blo, bhi). That is every state the Rust evaluation makes from
-- S at one instant: a charge adds its entries at now after every entry at or before now and
-- keeps the newest n, a refund drops the newest, time drops the oldest. A view passed in is
-- never changed (one may be another check's input). batch.lua's writes wait for `log_flush`,
-- so that every view's ranks are S's; a lone check writes its one view at once.
--
-- Both are arrays, not records: a lone check makes few tables, and small ones (an array of six
-- is half the bytes of a record). Globals are not used either (`math.min`: algorithm.lua's
-- `min`): in Redis each use of one costs a lookup behind the table that guards them (the
-- lone check's Redis instructions fell by a seventh without them).
--   S     { key, total (ZCARD), p (entries at or before now; false until known), seq (the
--         next sequence number at now; false when unknown), cut, dead (entries at or before
--         cut, counted for that cut; cut false until counted), true (S, not a view) }
--   view  { S (false: the key holds nothing), alo, ahi, k, blo, bhi }

-- The texts of the last now, its first member and its cut (now - window). In the library these
-- outlive the call, and a batch decides at one instant, mostly for one window: the compares
-- save formatting the numbers on every decision.
local last_now, last_at, last_first, last_window, last_cut = nil, nil, nil, nil, nil

-- An integer's text: '%d' prints the digits '%.0f' does for the integers every time is (below
-- 2^53), with integer arithmetic: '%.0f' of a time costs more than a Redis command.
local function log_int(x)
  if x > -MAX and x < MAX and x % 1 == 0 and x ~= 0 then
    return string.format('%d', x)
  end
  return string.format('%.0f', x)
end

local function log_at_text(now)
  if now ~= last_now then
    last_now, last_at, last_window = now, log_int(now), nil
    last_first = last_at .. ':0000000000'
  end
  return last_at
end

local function log_cut_text(now, window)
  log_at_text(now)
  if window ~= last_window then
    last_window, last_cut = window, log_int(now - window)
  end
  return last_cut
end

-- The state of `key` as read (S, every field made here: a table that grows is allocated
-- again), or nil when it holds no entry.
local function log_read(key)
  local total = redis.call('ZCARD', key)
  if total == 0 then
    return nil
  end
  return { key, total, false, false, false, 0, true }
end

local function log_score(s, rank)
  return tonumber(redis.call('ZRANGE', s[1], rank, rank, 'WITHSCORES')[2])
end

-- `st` (a state read, a view, or nil) as a view at `now`, copied. A stored set is first seen
-- through its newest entry at or after now: none or at now (the commonest), every entry is at
-- or before now, and it tells the sequence number new entries at now take (`seq`); after now,
-- ZCOUNT tells how many are.
local function log_view(st, now)
  if st == nil then
    return { false, 0, 0, 0, 0, 0 }
  end
  if st[7] then
    -- As read: S whole.
    local s = st
    if not s[3] then
      -- The newest entry at or after now, its member only: a score comes back printed as
      -- '%.17g', dearer than the rest of the read. None (the commonest): every entry is
      -- before now. At now (its member starts with now's text): it is the last at now.
      local at = log_at_text(now)
      local top = redis.call('ZRANGE', s[1], '+inf', at, 'BYSCORE', 'REV', 'LIMIT', 0, 1)[1]
      if top == nil then
        s[3], s[4] = s[2], 0
      elseif string.sub(top, 1, -12) == at then
        s[3], s[4] = s[2], tonumber(string.sub(top, -10)) + 1
      else
        s[3] = s[2] - redis.call('ZCOUNT', s[1], '(' .. at, '+inf')
      end
    end
    return { s, 0, s[3], 0, s[3], s[2] }
  end
  return { st[1], st[2], st[3], st[4], st[5], st[6] }
end

local function log_len(v)
  return (v[3] - v[2]) + v[4] + (v[6] - v[5])
end

-- The time of the view's i-th entry (1 = oldest).
local function log_at(v, now, i)
  local a = v[3] - v[2]
  if i <= a then
    return log_score(v[1], v[2] + i - 1)
  end
  if i <= a + v[4] then
    return now
  end
  return log_score(v[1], v[5] + i - a - v[4] - 1)
end

local function log_drop_oldest(v, x)
  local a = min(x, v[3] - v[2])
  v[2], x = v[2] + a, x - a
  local k = min(x, v[4])
  v[4], x = v[4] - k, x - k
  v[5] = v[5] + min(x, v[6] - v[5])
end

local function log_drop_newest(v, x)
  local b = min(x, v[6] - v[5])
  v[6], x = v[6] - b, x - b
  local k = min(x, v[4])
  v[4], x = v[4] - k, x - k
  v[3] = v[3] - min(x, v[3] - v[2])
end

-- Until the view's newest entry leaves the window (0 when it is empty).
local function log_until_empty(v, now, window)
  local len = log_len(v)
  if len == 0 then
    return 0
  end
  return max(log_at(v, now, len) + window - now, 0)
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
  return max(log_at(v, now, m) + window - now, 0)
end

-- src/algorithm/sliding_log.rs `evaluate` on a state, for the port and the lone entry point
-- alike: allowed, remaining, reset, debt_reset, the state after charging (a view) and its
-- expiry (algorithm.lua's Outcome, flat: a lone check makes no table of it).
local function log_evaluate(st, now, window, n, hits, refund)
  -- A copy, changed in place below.
  local v = log_view(st, now)
  local s = v[1]
  if s then
    -- The entries at or before now - window have left: S's oldest, so A's front. Counted
    -- once per key and cut (a key's checks share their window).
    local cut = now - window
    if s[5] ~= cut then
      s[5], s[6] = cut, redis.call('ZCOUNT', s[1], '-inf', log_cut_text(now, window))
    end
    if s[6] > v[2] then
      v[2] = min(s[6], v[3])
    end
  end
  if refund then
    log_drop_newest(v, hits)
    local reset = log_until_empty(v, now, window)
    return true, max(n - log_len(v), 0), reset, reset, v, now + reset
  end
  local allowed = hits <= n and log_len(v) + hits <= n
  local uncharged = 0
  if not allowed then
    uncharged = log_retry(v, now, window, n, hits)
  end
  -- Charged: min(hits, n) entries at now, then only the newest n kept.
  v[4] = v[4] + min(hits, n)
  local over = log_len(v) - n
  if over > 0 then
    log_drop_oldest(v, over)
  end
  local u = log_until_empty(v, now, window)
  if allowed then
    return true, n - log_len(v), u, u, v, now + u
  end
  return false, 0, uncharged, log_retry(v, now, window, n, hits), v, now + u
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

-- Adds `count` entries at now from sequence number `seq`, in chunks: unpack has a stack limit.
local function log_add(key, now, seq, count)
  local at = log_at_text(now)
  if count == 1 then
    -- The commonest: one entry, without a table of arguments.
    local member = last_first
    if seq ~= 0 then
      member = at .. ':' .. string.format('%010d', seq)
    end
    redis.call('ZADD', key, at, member)
    return
  end
  local j = 0
  while j < count do
    local args = { 'ZADD', key }
    local stop = min(j + 500, count)
    for i = j, stop - 1 do
      args[#args + 1] = at
      args[#args + 1] = at .. ':' .. string.format('%010d', seq + i)
    end
    redis.call(unpack(args))
    j = stop
  end
end

-- Writes view `v` as `key`'s state with an expiry of `ms`, `v`'s ranks being those of the set
-- the key holds: S's ranks outside it removed (highest first, so the lower ones stand), then
-- its entries at now.
local function log_store(key, v, ms, now)
  local s = v[1]
  if s then
    if v[6] < s[2] then
      redis.call('ZREMRANGEBYRANK', key, v[6], s[2] - 1)
    end
    if v[3] < v[5] then
      redis.call('ZREMRANGEBYRANK', key, v[3], v[5] - 1)
    end
    if v[2] > 0 then
      redis.call('ZREMRANGEBYRANK', key, 0, v[2] - 1)
    end
  end
  if v[4] > 0 then
    local seq = s and s[4]
    if not seq then
      seq = 0
      if s then
        seq = log_next_seq(key, log_at_text(now))
      end
    end
    log_add(key, now, seq, v[4])
  end
  if log_len(v) == 0 then
    redis.call('DEL', key)
  else
    redis.call('PEXPIRE', key, ms)
  end
end

-- batch.lua's writes, kept until the call flushes: several checks of one key each read S.
local log_pending, log_pending_keys = {}, {}

-- Keeps `v` as `key`'s state with an expiry of `ms`, when the call flushes.
local function log_write(key, v, ms)
  if log_pending[key] == nil then
    log_pending_keys[#log_pending_keys + 1] = key
  end
  log_pending[key] = { v = v, ms = ms }
end

local function log_flush(now)
  for _, key in ipairs(log_pending_keys) do
    local p = log_pending[key]
    log_store(key, p.v, p.ms, now)
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
    local allowed, rem, reset, debt_reset, v, e =
      log_evaluate(st, f.now, c.window, c.limit, hits, refund)
    return { allowed = allowed, remaining = rem, reset = reset, debt_reset = debt_reset,
      state = v, expires_at = e }
  end
  return sliding_log
end

-- A request of one sliding_log check (no dry run): this function of the key, now and its
-- values as sent (text: limit, window (us, >= 1), hits, flags), answering flags (1 allowed + 2
-- charged), remaining and reset: the port's read and evaluation under the one-check policy
-- (alone.lua), its one view written at once (nothing else of the call can read the key).
local function sliding_log(key, now, a2, a3, a4, a5)
  -- One hit and mode 0 are the commonest: a compare of interned strings, not a conversion.
  local hits = a4 == '1' and 1 or a4 - 0
  local mode = a5 == '0' and 0 or a5 - 0
  local allowed, rem, reset, debt_reset, v, e =
    log_evaluate(log_read(key), now, a3 - 0, a2 - 0, hits, has(mode, FLAG_REFUND))
  local flags = alone_flags(allowed, hits, mode)
  if flags < 2 then
    return flags, rem, reset
  end
  log_store(key, v, ttl_ms(e - now), now)
  return flags, rem, debt_reset
end
