-- sluice: one request's rate-limit decision, atomically (check and charge in one script).
--
-- A port of src/store/batch.rs (the charging policy) over ports of src/algorithm/* (the
-- arithmetic); every number is an integer below 2^53, so Lua's doubles agree with Rust's
-- integers bit for bit (the HyperLogLog estimate of `distinct` is the one floating-point step,
-- done in the same IEEE operations in the same order as Rust). The argument layout is written
-- by src/store/redis/script.rs:
--
--   KEYS       the distinct keys of the checks
--   ARGV[1]    scope: 'all'  the checks are the whole request: the exact batch policy
--                     'part' the checks are some descriptors of a request whose other
--                            descriptors live elsewhere (Redis Cluster): admission assumes the
--                            descriptors not seen here pass; the caller undoes what it must
--                     'undo' give back the hits of every check (they were charged by 'part')
--                     'settle' as 'all' if the last key exists and is no marker; it is then
--                            replaced by the marker (the ARGV after the checks) or deleted
--                            (marker ''); else nothing changes and the reply is { -1 }
--   ARGV[2]    now in microseconds, or '' to read the Redis clock (TIME)
--   ARGV[3]    number of checks, then FIELDS values per check:
--              key index (into KEYS), algorithm code, limit, window (us), param (burst of a
--              bucket, precision of a sliding_window, else 0), value (distinct: the value's
--              hash as 16 hex digits, else ''), hits, flags (expiry.lua's bits: FLAG_REFUND,
--              FLAG_ALWAYS charge always, FLAG_DRY_RUN decided but changing nothing,
--              FLAG_QUOTA), group, window start, window end, previous window start, next
--              window end
--              (the four '' unless the caller computed the window: calendar windows; the
--              previous and next ones only when `now` is read here, so that a Redis clock
--              on the other side of a boundary from sluice's still finds its window)
--
-- Reply: { now, then per check: allowed, remaining, reset (us), charged, allowed in the first
-- pass } with booleans as 0/1.
--
-- The commonest request of several checks has a short layout of its own, scope 'fixed':
-- takes of distinct keys (hits >= 1, no refund, dry run, charge-always or quota mode), each a
-- fixed_window with an epoch-aligned window or, at most one of them, a sliding_log:
--
--   KEYS       each check's key, in order
--   ARGV[1]    'fixed'       ARGV[2] now, as above       ARGV[3] number of checks
--   ARGV[4]    the checks' groups separated by spaces, or '' when check i is group i - 1
--   then per check: limit, window (us), hits, algorithm code (1 or 3, as above)
--
-- answered { now, then per check: remaining, reset (us) } when every check is allowed (so
-- charged, and allowed in the first pass), else as 'all' in the long reply.

local FIELDS = 13
local SHORT_FIXED = '1' -- the short layout's algorithm code of a fixed_window
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

-- The two decimal integers of `raw` separated by spaces, the second not negative, or nil if it
-- holds anything else (what `ints` accepts with two values, without its iterator and table of
-- tokens: this is the state of the commonest algorithms).
local function pair(raw)
  local a, b = string.match(raw, '^%s*(%-?%d+)%s+(%-?%d+)%s*$')
  if a == nil then
    return nil
  end
  b = tonumber(b)
  if b < 0 then
    return nil
  end
  return { tonumber(a), b }
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

---------------------------------------------------------------------------------------------
-- Algorithms: each reads its stored state (`read`: a hash for fixed_window, else a string it
-- decodes), evaluates (limit, state, frame, ask) exactly as its Rust twin, and writes the
-- charged state (`write`, with the key's expiry in ms). Outcome: { allowed, remaining, reset,
-- debt_reset, state, expires_at } as Rust's `Outcome`. States are never modified in place:
-- an outcome's state may be another check's input (the same key twice in one request).
---------------------------------------------------------------------------------------------

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

-- The state of fixed_window and of the buckets: two integers.
local function encode_pair(st)
  return int(st[1]) .. ' ' .. int(st[2])
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

-- fixed_window (src/algorithm/fixed_window.rs); state { window_start, count }, stored as a
-- hash of one field, the window's start, holding count + 1 (fixed_window.lua: the layout and
-- why; that script increments it in place).
local function new_fixed_window()
  local fixed_window = {}

  function fixed_window.read(key)
    local f = redis.call('HGETALL', key)
    local s, v = tonumber(f[1]), tonumber(f[2])
    if s == nil or v == nil or v < 1 or v > COUNT_CAP + 1 then
      return nil
    end
    return { s, v - 1 }
  end

  -- `read`: what `read` gave for the key. In the window it holds, one HSET: its expiry, set
  -- when the window began, stands. A new window replaces the hash and sets its expiry.
  function fixed_window.write(key, st, ms, read)
    if read and read[1] == st[1] then
      redis.call('HSET', key, st[1], st[2] + 1)
      return
    end
    redis.call('DEL', key)
    redis.call('HSET', key, st[1], st[2] + 1)
    if read and read[1] < st[1] then
      redis.call('HSET', key, int(read[1]), SUPERSEDED)
    end
    redis.call('PEXPIRE', key, ms)
  end

  function fixed_window.evaluate(c, st, f, hits, refund)
    local start, e, until_end = window_of(st and st[1], f)
    local count = 0
    if st ~= nil and st[1] == start then
      count = st[2]
    end
    local function out(allowed, rem, cnt)
      return { allowed = allowed, remaining = rem, reset = until_end, debt_reset = until_end,
        state = { start, cnt }, expires_at = e }
    end
    if refund then
      count = max(count - hits, 0)
      return out(true, max(c.limit - count, 0), count)
    end
    local after = min(add(count, hits), max(COUNT_CAP, count))
    local allowed = count + hits <= c.limit
    local rem = 0
    if allowed then
      rem = c.limit - after
    end
    return out(allowed, rem, after)
  end
  return fixed_window
end

-- sliding_window (src/algorithm/sliding_window.rs); state 'head c0 c1 ... cP', the counts
-- newest first, trailing zeros left out.
local function new_sliding_window()
  local sliding_window = {}
  sliding_window.read = function(key) return read_string(sliding_window, key) end
  sliding_window.write = function(key, st, ttl) write_string(sliding_window, key, st, ttl) end

  function sliding_window.decode(raw)
    local v = ints(raw)
    if v == nil then
      return nil
    end
    local st = { head = v[1], counts = {} }
    for j = 2, #v do
      if v[j] < 0 then
        return nil
      end
      st.counts[j - 1] = v[j]
    end
    return st
  end

  function sliding_window.encode(st)
    local last = #st.counts
    while last > 0 and st.counts[last] == 0 do
      last = last - 1
    end
    local parts = { int(st.head) }
    for j = 1, last do
      parts[#parts + 1] = int(st.counts[j])
    end
    return table.concat(parts, ' ')
  end

  function sliding_window.evaluate(c, st, f, hits, refund)
    local p = max(c.param, 1)
    local sub = max(fdiv(c.window, p), 1)
    local window = sub * p
    local now = f.now
    local i = fdiv(now, sub)
    -- counts[1 + j] belongs to sub-window head - j.
    local head, counts = i, {}
    if st ~= nil and #st.counts <= p + 1 then
      head = max(st.head, i)
      local shift = min(head - st.head, p + 1)
      for j = 1, p + 1 do
        counts[j] = 0
        if j > shift then
          counts[j] = st.counts[j - shift] or 0
        end
      end
    else
      for j = 1, p + 1 do
        counts[j] = 0
      end
    end
    local function sum()
      local s = 0
      for j = 1, p + 1 do
        s = s + counts[j]
      end
      return s
    end
    local function drop_at(k)
      return (k + 1) * sub + window
    end
    local function until_empty()
      for j = 1, p + 1 do
        if counts[j] > 0 then
          return max(drop_at(head - (j - 1)) - now, 0)
        end
      end
      return 0
    end
    local function retry()
      if hits > c.limit then
        return until_empty()
      end
      local total = sum()
      for j = p, 0, -1 do
        if total + hits <= c.limit then
          if j == p then
            return 0
          end
          return max(drop_at(head - j - 1) - now, 0)
        end
        total = total - counts[j + 1]
      end
      return until_empty()
    end
    local function state()
      return { head = head, counts = counts }
    end

    if refund then
      local left = hits
      for j = 1, p + 1 do
        local take = min(left, counts[j])
        counts[j] = counts[j] - take
        left = left - take
      end
      local reset = until_empty()
      return { allowed = true, remaining = max(c.limit - sum(), 0), reset = reset,
        debt_reset = reset, state = state(), expires_at = now + reset }
    end

    local count = sum()
    local allowed = count + hits <= c.limit
    local uncharged = 0
    if not allowed then
      uncharged = retry()
    end
    counts[1] = counts[1] + min(hits, max(COUNT_CAP - count, 0))
    local after = sum()
    local u = until_empty()
    local o = { allowed = allowed, remaining = 0, reset = u, debt_reset = u, state = state(),
      expires_at = now + u }
    if allowed then
      o.remaining = c.limit - after
    else
      o.reset = uncharged
      o.debt_reset = retry()
    end
    return o
  end
  return sliding_window
end

-- sliding_log (src/algorithm/sliding_log.rs); state: a view of the stored sorted set, decided
-- in O(log n) of its entries (sliding_log.lua, `log_evaluate`).
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

-- token_bucket, leaky_bucket and gcra: the shared meter (src/algorithm/bucket.rs); state
-- 'at level' in ticks.
local function new_bucket()
  local bucket = {}
  bucket.read = function(key) return read_string(bucket, key) end
  bucket.write = function(key, st, ttl) write_string(bucket, key, st, ttl) end

  function bucket.decode(raw)
    return pair(raw)
  end

  bucket.encode = encode_pair

  local function gcd(a, b)
    while b ~= 0 do
      a, b = b, math.fmod(a, b)
    end
    return a
  end

  function bucket.evaluate(c, st, f, hits, refund)
    local now = f.now
    if c.limit == 0 then
      -- requests_per_unit 0: nothing passes but looks and refunds, and nothing is kept.
      return { allowed = hits == 0 or refund, remaining = 0, reset = 0, debt_reset = 0,
        state = { now, 0 }, expires_at = now }
    end
    local w = max(c.window, 1)
    local g = gcd(w, c.limit)
    -- g divides both: these quotients are exact.
    local hit, drain, burst = w / g, c.limit / g, c.param
    local cap = burst * hit
    local function until_level(level, target)
      if level <= target then
        return 0
      end
      return cdiv(level - target, drain)
    end
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
    local function out(allowed, remaining, reset, debt_reset, lvl)
      return { allowed = allowed, remaining = remaining, reset = skew + reset,
        debt_reset = skew + debt_reset, state = { at, lvl }, expires_at = at + until_level(lvl, 0) }
    end
    local function remaining_at(lvl)
      return fdiv(max(cap - lvl, 0), hit)
    end
    if refund then
      local lvl = 0
      if hits <= fdiv(level, hit) then
        lvl = level - hits * hit
      end
      local r = until_level(lvl, 0)
      return out(true, remaining_at(lvl), r, r, lvl)
    end
    if hits <= burst and level + hits * hit <= cap then
      local lvl = level + hits * hit
      local r = until_level(lvl, 0)
      return out(true, remaining_at(lvl), r, r, lvl)
    end
    local function retry(lvl)
      if hits > burst then
        return until_level(lvl, 0)
      end
      return until_level(lvl, cap - hits * hit)
    end
    local debt_cap = 2 * cap
    local debt
    if hits > 2 * burst then
      debt = max(debt_cap, level)
    else
      debt = max(min(level + hits * hit, debt_cap), level)
    end
    return out(false, 0, retry(level), retry(debt), debt)
  end
  return bucket
end

-- distinct (src/algorithm/distinct.rs). Values arrive as SipHash hashes (16 hex digits).
-- Exact (limit <= 1000): state 'e <window_start>\n' then the hashes, 8 bytes big-endian each,
-- ascending. HyperLogLog (limit > 1000): 'h <window_start> <n0> ... <n51>\n' (how many
-- registers hold each rank, kept so that the estimate never sums all registers) then the
-- 2^14 registers, one byte each. States are { ws, hll, data, ranks }.
local function new_distinct()
  local distinct = {}
  distinct.read = function(key) return read_string(distinct, key) end
  distinct.write = function(key, st, ttl) write_string(distinct, key, st, ttl) end
  local EXACT_MAX = 1000
  local REGISTERS = 16384
  local MAX_RANK = 51
  -- POW[k] = 2^-k, exact. Built on first use: the whole script runs on every call, and only a
  -- HyperLogLog estimate needs it (building it costs about 2 us of Redis CPU).
  local POW = nil
  local function pow_table()
    local t = { [0] = 1 }
    for k = 1, MAX_RANK do
      t[k] = t[k - 1] / 2
    end
    return t
  end

  function distinct.decode(raw)
    local nl = string.find(raw, '\n', 1, true)
    if nl == nil then
      return nil
    end
    local kind, rest = string.match(string.sub(raw, 1, nl - 1), '^([eh]) (.*)$')
    local v = rest and ints(rest)
    if v == nil then
      return nil
    end
    local data = string.sub(raw, nl + 1)
    if kind == 'e' then
      if #v ~= 1 or #data % 8 ~= 0 then
        return nil
      end
      return { ws = v[1], hll = false, data = data }
    end
    if #v ~= MAX_RANK + 2 or #data ~= REGISTERS then
      return nil
    end
    local ranks = {}
    for k = 0, MAX_RANK do
      ranks[k] = v[k + 2]
    end
    return { ws = v[1], hll = true, data = data, ranks = ranks }
  end

  function distinct.encode(st)
    if not st.hll then
      return 'e ' .. int(st.ws) .. '\n' .. st.data
    end
    local parts = { 'h', int(st.ws) }
    for k = 0, MAX_RANK do
      parts[#parts + 1] = int(st.ranks[k])
    end
    return table.concat(parts, ' ') .. '\n' .. st.data
  end

  -- Rust's `estimate_by_rank`, operation for operation.
  local function estimate(ranks)
    local m = REGISTERS
    local sum = 0.0
    if POW == nil then
      POW = pow_table()
    end
    for k = 0, MAX_RANK do
      sum = sum + ranks[k] * POW[k]
    end
    local zeros = ranks[0]
    local alpha = 0.7213 / (1.0 + 1.079 / m)
    local raw = alpha * m * m / sum
    local e = raw
    if raw <= 2.5 * m and zeros > 0 then
      e = m * math.log(m / zeros)
    end
    -- f64::round: halves away from zero (e >= 0; e - floor(e) is exact).
    local fl = math.floor(e)
    if e - fl >= 0.5 then
      fl = fl + 1
    end
    return fl
  end

  -- The hash as its 8 big-endian bytes, and its HyperLogLog register (0-based) and rank.
  local function parse_hash(hex)
    local bytes = {}
    for j = 1, 16, 2 do
      bytes[#bytes + 1] = tonumber(string.sub(hex, j, j + 1), 16)
    end
    local top = tonumber(string.sub(hex, 1, 4), 16)
    -- The 50 bits below the 14 index bits (exact: below 2^53).
    local rest = math.fmod(top, 4) * 281474976710656 + tonumber(string.sub(hex, 5, 16), 16)
    local bits = 0
    while rest >= 1 do
      rest = math.floor(rest / 2)
      bits = bits + 1
    end
    return string.char(unpack(bytes)), math.floor(top / 4), MAX_RANK - bits
  end

  -- Position of an 8-byte hash in a sorted packed set: (found, 0-based index to insert at).
  -- Bytes are compared as numbers (Lua's string `<` follows the locale).
  local function search(data, h)
    local lo, hi = 0, #data / 8
    local hb = { string.byte(h, 1, 8) }
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      local eb = { string.byte(data, mid * 8 + 1, mid * 8 + 8) }
      local cmp = 0
      for j = 1, 8 do
        if eb[j] ~= hb[j] then
          if eb[j] < hb[j] then
            cmp = -1
          else
            cmp = 1
          end
          break
        end
      end
      if cmp == 0 then
        return true, mid
      elseif cmp < 0 then
        lo = mid + 1
      else
        hi = mid
      end
    end
    return false, lo
  end

  function distinct.evaluate(c, st, f, hits, refund)
    local hll = c.limit > EXACT_MAX
    if st ~= nil and st.hll ~= hll then
      st = nil
    end
    local start, e, until_end = window_of(st and st.ws, f)
    local values = st
    if st == nil or st.ws ~= start then
      values = { ws = start, hll = hll, data = '' }
      if hll then
        values.data = string.rep('\0', REGISTERS)
        values.ranks = {}
        for k = 0, MAX_RANK do
          values.ranks[k] = 0
        end
        values.ranks[0] = REGISTERS
      end
    end
    local h, reg, rank = parse_hash(c.value)
    local function count(v)
      if v.hll then
        return estimate(v.ranks)
      end
      return #v.data / 8
    end
    local function insert(v)
      if v.hll then
        local old = string.byte(v.data, reg + 1)
        if old >= rank then
          return v
        end
        local ranks = {}
        for k = 0, MAX_RANK do
          ranks[k] = v.ranks[k]
        end
        ranks[old] = ranks[old] - 1
        ranks[rank] = ranks[rank] + 1
        local data = string.sub(v.data, 1, reg) .. string.char(rank) .. string.sub(v.data, reg + 2)
        return { ws = v.ws, hll = true, data = data, ranks = ranks }
      end
      local found, at = search(v.data, h)
      if found then
        return v
      end
      local data = string.sub(v.data, 1, at * 8) .. h .. string.sub(v.data, at * 8 + 1)
      return { ws = v.ws, hll = false, data = data }
    end
    local before = count(values)
    local seen
    if hll then
      seen = string.byte(values.data, reg + 1) >= rank
    else
      seen = search(values.data, h)
    end

    local allowed
    if refund then
      allowed = true
    elseif hll then
      allowed = before < c.limit
      if allowed and hits > 0 and not seen then
        values = insert(values)
      end
    elseif seen then
      allowed = true
    else
      local added = insert(values)
      allowed = count(added) <= c.limit
      if allowed and hits > 0 then
        values = added
      end
    end
    local remaining = 0
    if allowed then
      if hits == 0 or refund then
        remaining = max(c.limit - before, 0)
      else
        remaining = max(c.limit - count(values), 0)
      end
    end
    return { allowed = allowed, remaining = remaining, reset = until_end, debt_reset = until_end,
      state = values, expires_at = e }
  end
  return distinct
end

-- concurrency (src/algorithm/concurrency.rs); state 'e1 c1 d2 c2 ...': the live leases grouped
-- by expiry, oldest first: the first expiry and its count, then each expiry's distance to the
-- one before (> 0) and its count (>= 1). At most LEASE_SLOTS + 1 groups.
local function new_concurrency()
  local concurrency = {}
  local LEASE_SLOTS = 1000

  function concurrency.decode(raw)
    local v = ints(raw)
    if v == nil or #v % 2 ~= 0 then
      return nil
    end
    local leases = {}
    local e = 0
    for j = 1, #v, 2 do
      if v[j + 1] < 1 or (j > 1 and v[j] < 1) then
        return nil
      end
      if j == 1 then
        e = v[j]
      else
        e = e + v[j]
      end
      leases[#leases + 1] = { e, v[j + 1] }
    end
    return leases
  end

  function concurrency.encode(leases)
    local parts = {}
    for j, g in ipairs(leases) do
      if j == 1 then
        parts[1] = int(g[1])
      else
        parts[#parts + 1] = int(g[1] - leases[j - 1][1])
      end
      parts[#parts + 1] = int(g[2])
    end
    return table.concat(parts, ' ')
  end

  -- now + lease time rounded up to a slot of ceil(lease time / LEASE_SLOTS) us.
  local function expiry(now, lease)
    local slot = cdiv(max(lease, 1), LEASE_SLOTS)
    local e = now + lease
    local r = math.fmod(e, slot)
    if r < 0 then
      r = r + slot
    end
    if r == 0 then
      return e
    end
    return e + slot - r
  end

  function concurrency.evaluate(c, st, f, hits, refund)
    local n, now = c.limit, f.now
    -- Live groups, copied: the stored state may be another check's input.
    local leases = {}
    if st ~= nil then
      for _, g in ipairs(st) do
        if g[1] > now then
          leases[#leases + 1] = { g[1], g[2] }
        end
      end
    end
    local function held()
      local s = 0
      for _, g in ipairs(leases) do
        s = add(s, g[2])
      end
      return s
    end
    local function until_empty()
      if #leases == 0 then
        return 0
      end
      return max(leases[#leases][1] - now, 0)
    end

    if refund then
      -- Give back the oldest leases first.
      local left, from = hits, 1
      while left > 0 and from <= #leases do
        local g = leases[from]
        if g[2] > left then
          g[2] = g[2] - left
          left = 0
        else
          left = left - g[2]
          from = from + 1
        end
      end
      local kept = {}
      for j = from, #leases do
        kept[#kept + 1] = leases[j]
      end
      leases = kept
      local r = until_empty()
      return { allowed = true, remaining = max(n - held(), 0), reset = r, debt_reset = r,
        state = leases, expires_at = now + r }
    end

    local in_flight = held()
    local allowed = hits <= n and add(in_flight, hits) <= n
    local reset
    if allowed then
      if hits > 0 then
        local at = expiry(now, c.window)
        local i = 1
        while i <= #leases and leases[i][1] < at do
          i = i + 1
        end
        if i <= #leases and leases[i][1] == at then
          leases[i][2] = add(leases[i][2], hits)
        else
          table.insert(leases, i, { at, hits })
        end
      end
      reset = until_empty()
    elseif hits > n then
      reset = until_empty()
    else
      -- The oldest in_flight + hits - n leases must expire first.
      local must_go = in_flight + hits - n
      local seen, at = 0, now
      for _, g in ipairs(leases) do
        seen = add(seen, g[2])
        if seen >= must_go then
          at = g[1]
          break
        end
      end
      reset = max(at - now, 0)
    end
    local remaining = 0
    if allowed then
      remaining = max(n - held(), 0)
    end
    return { allowed = allowed, remaining = remaining, reset = reset, debt_reset = reset,
      state = leases, expires_at = now + until_empty() }
  end
  concurrency.read = function(key) return read_string(concurrency, key) end
  concurrency.write = function(key, st, ttl) write_string(concurrency, key, st, ttl) end
  return concurrency
end

-- Algorithm codes: src/store/redis/script.rs `algorithm_code`.
-- Each is made when a call first needs it: the whole script runs on every call, and making
-- every algorithm's functions costs more Redis CPU than deciding most checks.
local ALGORITHMS = {
  [1] = new_fixed_window,
  [2] = new_sliding_window,
  [3] = new_sliding_log,
  [4] = new_bucket, -- token_bucket
  [5] = new_bucket, -- leaky_bucket
  [6] = new_bucket, -- gcra
  [7] = new_distinct,
  [8] = new_concurrency,
}
local DISTINCT = 7
local made = {}
local function algorithm(code)
  local new = ALGORITHMS[code]
  if new == nil then
    return nil
  end
  local a = made[new]
  if a == nil then
    a = new()
    made[new] = a
  end
  return a
end

-- Scope 'fixed' (the short layout above): each fixed_window check charged by one HINCRBY in
-- the window its key holds, the window's field text looked up rather than formatted per call;
-- then the sliding_log check, if any, by its own function (sliding_log.lua), which charges it
-- only if it is allowed, in O(log n) of its entries. When all are
-- allowed there, that is the policy's answer too (every check allowed, so every check
-- charged: the same state and expiry as the general path's writes). A key's first take of a
-- window (the field absent) is kept when the key holds nothing else or only an ended window,
-- which is then deleted: the state the general path's DEL and HSET leave. Anything else gives
-- back what was taken and answers nil, for the general path to decide on the very state it
-- started from. (pcall: a key of another type fails the general path before it writes
-- anything, and so must this one.)
local FIELD_TEXT, field_texts = {}, 0
local function field_text(ws)
  local f = FIELD_TEXT[ws]
  if f == nil then
    if field_texts >= 64 then
      FIELD_TEXT, field_texts = {}, 0
    end
    f = string.format('%.17g', ws)
    FIELD_TEXT[ws] = f
    field_texts = field_texts + 1
  end
  return f
end

-- The short layout is read where it lies: check i's key is keys[ko + i] and its values follow
-- a[ao + 4] (the library's batch passes its own tables, not a copy per decision).

-- The epoch-aligned window of `now` for a window of `wt` us (text): its start, its field's
-- text and its end.
local function short_window(wt, now)
  local ws, we = epoch_window(now, tonumber(wt))
  return ws, field_text(ws), we
end

-- Gives back the takes of checks 1..last (`first[i]`: check i's field was absent before).
local function give_back(keys, ko, a, ao, now, last, first)
  for i = last, 1, -1 do
    local b = ao + i * 4
    if a[b + 4] == SHORT_FIXED then
      local _, field = short_window(a[b + 2], now)
      if first ~= nil and first[i] then
        redis.call('HDEL', keys[ko + i], field)
      else
        redis.call('HINCRBY', keys[ko + i], field, -tonumber(a[b + 3]))
      end
    end
  end
end

local function take_short(keys, ko, a, ao, now, n)
  local out = { now }
  local first = nil
  local log = nil
  -- Checks of one request mostly share their window: its numbers are worked out once.
  local wt, ws, field, until_end = nil, nil, nil, nil
  for i = 1, n do
    local b = ao + i * 4
    if a[b + 4] ~= SHORT_FIXED then
      log = i
    else
      local limit, h = tonumber(a[b + 1]), a[b + 3]
      local hits = h == '1' and 1 or tonumber(h)
      if a[b + 2] ~= wt then
        local we
        wt = a[b + 2]
        ws, field, we = short_window(wt, now)
        until_end = max(we - now, 0)
      end
      local key = keys[ko + i]
      local v = redis.pcall('HINCRBY', key, field, h)
      local after = nil
      if type(v) == 'number' then
        if v > hits then
          after = v - 1
        elseif v == hits then
          after = hits
          first = first or {}
          first[i] = ws
        end
      end
      if after == nil or after > limit or after > COUNT_CAP then
        if type(v) == 'number' then
          if v == hits then
            redis.call('HDEL', key, field)
          else
            redis.call('HINCRBY', key, field, -hits)
          end
        end
        give_back(keys, ko, a, ao, now, i - 1, first)
        return nil
      end
      if v == hits then
        -- The count is stored plus one.
        redis.call('HINCRBY', key, field, 1)
      end
      out[i * 2], out[i * 2 + 1] = limit - after, until_end
    end
  end
  -- First takes: what else each key holds, all read before anything is deleted.
  local ended = {}
  for i = 1, first and n or 0 do
    local fws = first[i]
    if fws ~= nil then
      local f = redis.call('HGETALL', keys[ko + i])
      local other = nil
      if f[3] == nil then
        other = false
      elseif f[5] == nil then
        local o = 1
        if f[1] == field_text(fws) then
          o = 3
        end
        local s, c = tonumber(f[o]), tonumber(f[o + 1])
        if s == nil or c == nil or c < 1 or s < fws then
          other = f[o]
        end
      end
      if other == nil then
        -- A later window (a clock behind), or more than one other field.
        give_back(keys, ko, a, ao, now, n, first)
        return nil
      end
      ended[i] = other
    end
  end
  -- The sliding_log check last, by its own function once every take above stands: allowed, it
  -- is charged; rejected, it wrote nothing, and the takes are given back.
  if log ~= nil then
    local b = ao + log * 4
    -- pcall: a key of another type fails the general path before it writes anything.
    local ok, answer, rem, reset =
      pcall(sliding_log, keys[ko + log], now, a[b + 1], a[b + 2], a[b + 3], '0')
    if not ok or answer ~= 3 then
      give_back(keys, ko, a, ao, now, n, first)
      return nil
    end
    out[log * 2], out[log * 2 + 1] = rem, reset
  end
  if first == nil then
    return out
  end
  for i = 1, n do
    if first[i] ~= nil then
      local key = keys[ko + i]
      if ended[i] then
        supersede(key, ended[i])
      end
      local _, _, we = short_window(a[ao + i * 4 + 2], now)
      expire(key, we - now)
    end
  end
  return out
end

-- The short layout's checks in the long layout, for the general path.
local function long_layout(a, n)
  local groups = {}
  for g in string.gmatch(a[4], '%d+') do
    groups[#groups + 1] = g
  end
  local long = { 'all', a[2], n }
  for i = 1, n do
    local b = 3 + (i - 1) * FIELDS
    long[b + 1], long[b + 2], long[b + 3], long[b + 4], long[b + 5] =
      i, a[4 + i * 4], a[1 + i * 4], a[2 + i * 4], '0'
    long[b + 6], long[b + 7], long[b + 8], long[b + 9] =
      '', a[3 + i * 4], '0', groups[i] or tostring(i - 1)
    long[b + 10], long[b + 11], long[b + 12], long[b + 13] = '', '', '', ''
  end
  return long
end

-- sluice:main -- Above: definitions, which the function library (library.rs) makes once;
-- below: what runs per call, the body of its `decide` function.
---------------------------------------------------------------------------------------------
-- Arguments
---------------------------------------------------------------------------------------------

local A = ARGV
local scope = A[1]
local now = num(A[2])
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local n = tonumber(A[3])
-- A call that failed midway left its sorted-set writes unflushed: they are not this call's.
log_pending, log_pending_keys = {}, {}

-- 'settle': a reservation's settlement, applied with its claim (the last key: the record, or
-- its claim in another slot) replaced by the marker after the checks (the record: so that a
-- retry after a lost reply learns it was applied) or deleted (the marker ''), or not at all,
-- so a failed settlement can be retried and a done one is not applied twice. The claim is
-- written after every other write: a script Redis refuses at its first write (OOM, a
-- replica) leaves the claim, and one that wrote goes on to its end.
local claim, marker = nil, nil
if scope == 'settle' then
  claim = KEYS[#KEYS]
  marker = A[3 + n * FIELDS + 1] or ''
  -- Gone, or a marker (Reservations::settle's SETTLED prefix): settled already.
  local head = redis.call('GETRANGE', claim, 0, 7)
  if head == '' or head == 'settled:' then
    return { -1 }
  end
  scope = 'all'
end
local function done(r)
  log_flush(now)
  if claim ~= nil then
    if marker == '' then
      redis.call('DEL', claim)
    else
      redis.call('SET', claim, marker, 'KEEPTTL')
    end
  end
  return r
end

if scope == 'fixed' then
  local taken = take_short(KEYS, 0, A, 0, now, n)
  if taken ~= nil then
    return taken
  end
  A, scope = long_layout(A, n), 'all'
end

local checks = {}
for i = 1, n do
  local b = 3 + (i - 1) * FIELDS
  local c = {
    k = tonumber(A[b + 1]),
    code = tonumber(A[b + 2]),
    limit = tonumber(A[b + 3]),
    window = tonumber(A[b + 4]),
    param = tonumber(A[b + 5]),
    value = A[b + 6],
    hits = tonumber(A[b + 7]),
    group = tonumber(A[b + 9]),
  }
  local flags = tonumber(A[b + 8])
  c.refund, c.always = has(flags, FLAG_REFUND), has(flags, FLAG_ALWAYS)
  c.dry, c.quota = has(flags, FLAG_DRY_RUN), has(flags, FLAG_QUOTA)
  c.algo = algorithm(c.code)
  if c.algo == nil then
    return redis.error_reply('sluice: unknown algorithm code ' .. tostring(A[b + 2]))
  end
  if c.code == DISTINCT and (#c.value ~= 16 or string.find(c.value, '^%x+$') == nil) then
    return redis.error_reply('sluice: distinct needs a 16-digit hex value')
  end
  -- The window of `now`: one of those the caller computed (calendar windows), else aligned to
  -- the epoch (src/algorithm/mod.rs `Frame::epoch_aligned`).
  local ws, we = num(A[b + 10]), num(A[b + 11])
  local pws, nwe = num(A[b + 12]), num(A[b + 13])
  if ws ~= nil and we ~= nil and not (ws <= now and now < we) then
    if pws ~= nil and pws <= now and now < ws then
      ws, we = pws, ws
    elseif nwe ~= nil and we <= now and now < nwe then
      ws, we = we, nwe
    else
      -- More than a window away from sluice's clock: calendar.rs's own fallback.
      ws, we = nil, nil
    end
  end
  if ws == nil or we == nil then
    ws, we = epoch_window(now, c.window)
  end
  c.frame = { now = now, wstart = ws, wend = we }
  checks[i] = c
end

---------------------------------------------------------------------------------------------
-- Stored states: read each key once; `current` follows the writes in request order.
---------------------------------------------------------------------------------------------

local stored = {}
local function stored_state(c)
  local s = stored[c.k]
  if s == nil then
    s = c.algo.read(KEYS[c.k]) or false
    stored[c.k] = s
  end
  return s or nil
end

local function put(c, o)
  if o.state == stored[c.k] then
    -- The very state read from the key (a distinct value seen before, a refund of distinct):
    -- nothing to write, and its expiry is unchanged.
    return
  end
  c.algo.write(KEYS[c.k], o.state, ttl_ms(o.expires_at - now), stored[c.k])
end

local function evaluate(c, st, hits, refund)
  return c.algo.evaluate(c, st, c.frame, hits, refund)
end

-- A rejected request that is charged anyway must also wait out its own debt (batch.rs
-- `verdict`).
local function reset_of(o, charged)
  if charged then
    return o.debt_reset
  end
  return o.reset
end

local function takes_effect(c)
  return c.hits > 0 and not c.dry
end

local function forced(c)
  return c.always or c.refund
end

-- Evaluates each check in order; a check for which `applies` holds leaves its charged state
-- for the checks after it (batch.rs `evaluate_in_order`).
local function evaluate_in_order(applies)
  local overlay = {}
  local out = {}
  for i, c in ipairs(checks) do
    local st = overlay[c.k]
    if st == nil then
      st = stored_state(c)
    end
    local o = evaluate(c, st, c.hits, c.refund)
    if takes_effect(c) and applies(c, o) then
      overlay[c.k] = o.state
    end
    out[i] = o
  end
  return out
end

local reply = { now }
local function b(x)
  if x then
    return 1
  end
  return 0
end
local function push(allowed, remaining, reset, charged, first_allowed)
  reply[#reply + 1] = b(allowed)
  reply[#reply + 1] = remaining
  reply[#reply + 1] = reset
  reply[#reply + 1] = b(charged)
  reply[#reply + 1] = b(first_allowed)
end

---------------------------------------------------------------------------------------------
-- 'undo': give back what a 'part' call charged (Redis Cluster, request rejected elsewhere).
-- Each verdict is what the check shows uncharged: its allowance without this request. A
-- distinct value cannot be given back (Rust's refund of distinct changes nothing, since a
-- HyperLogLog cannot forget a value, and an exact set cannot tell whether a concurrent request
-- counted the same value meanwhile): it stays counted, and its verdict says charged.
---------------------------------------------------------------------------------------------

if scope == 'undo' then
  local current = {}
  for _, c in ipairs(checks) do
    if c.code ~= DISTINCT then
      local st = current[c.k]
      if st == nil then
        st = stored_state(c)
      end
      local o = evaluate(c, st, c.hits, true)
      put(c, o)
      current[c.k] = o.state
    end
  end
  for _, c in ipairs(checks) do
    local st = current[c.k]
    if st == nil then
      st = stored_state(c)
    end
    local peek = evaluate(c, st, 0, false)
    push(true, peek.remaining, peek.reset, c.code == DISTINCT and takes_effect(c), true)
  end
  log_flush(now)
  return reply
end

if scope ~= 'all' and scope ~= 'part' then
  return redis.error_reply('sluice: unknown scope ' .. tostring(scope))
end

---------------------------------------------------------------------------------------------
-- The batch policy (src/store/batch.rs `decide`).
---------------------------------------------------------------------------------------------

-- Optimistic pass: assume every allowed (or forced) check is charged.
local first = evaluate_in_order(function(c, o)
  return o.allowed or forced(c)
end)

local all_allowed = true
for i = 1, n do
  if not first[i].allowed then
    all_allowed = false
    break
  end
end
if all_allowed then
  for i, c in ipairs(checks) do
    local o = first[i]
    if takes_effect(c) then
      put(c, o)
    end
    push(o.allowed, o.remaining, reset_of(o, takes_effect(c)), takes_effect(c), true)
  end
  return done(reply)
end

-- Admission (batch.rs `admission`). In 'part' scope the quota rule (reject when every quota
-- descriptor is over) needs descriptors this call cannot see: it is left to the caller.
local group_ok, is_quota, groups = {}, {}, {}
for i, c in ipairs(checks) do
  local g = c.group
  if group_ok[g] == nil then
    group_ok[g] = true
    is_quota[g] = false
    groups[#groups + 1] = g
  end
  if c.quota then
    is_quota[g] = true
  end
  if not first[i].allowed and not c.refund then
    group_ok[g] = false
  end
end
local admitted = true
local quota_groups, quota_rejected = 0, 0
for _, g in ipairs(groups) do
  if is_quota[g] then
    quota_groups = quota_groups + 1
    if not group_ok[g] then
      quota_rejected = quota_rejected + 1
    end
  elseif not group_ok[g] then
    admitted = false
  end
end
if scope == 'all' and quota_groups > 0 and quota_rejected == quota_groups then
  admitted = false
end

local function charged(c)
  return (admitted and group_ok[c.group]) or forced(c)
end

local second = evaluate_in_order(function(c, _)
  return charged(c)
end)

local current = {}
for i, c in ipairs(checks) do
  local before, after = first[i], second[i]
  if charged(c) then
    if takes_effect(c) then
      put(c, after)
      current[c.k] = after.state
    end
    push(after.allowed, after.remaining, reset_of(after, takes_effect(c)), takes_effect(c),
      before.allowed)
  elseif before.allowed then
    -- Allowed on its own but not charged: the allowance without this request.
    local st = current[c.k]
    if st == nil then
      st = stored_state(c)
    end
    local peek = evaluate(c, st, 0, false)
    push(true, peek.remaining, peek.reset, false, true)
  else
    push(before.allowed, before.remaining, before.reset, false, false)
  end
end
return done(reply)
