-- sluice: one request's rate-limit decision, atomically (check and charge in one script).
--
-- A port of src/store/batch.rs (the charging policy) over the algorithms' ports, one file each
-- beside this one (algorithm.lua: what they share); every number is an integer below 2^53, so
-- Lua's doubles agree with Rust's integers bit for bit (the HyperLogLog estimate of `distinct`
-- is the one floating-point step, done in the same IEEE operations in the same order as Rust).
-- script/mod.rs puts every other file before this one. The argument layout is written
-- by src/store/redis/script/mod.rs:
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

-- Algorithm codes: src/store/redis/script/mod.rs `algorithm_code`.
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
      fw_give_back(keys[ko + i], field, tonumber(a[b + 3]), first ~= nil and first[i] ~= nil)
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
      if a[b + 2] ~= wt then
        local we
        wt = a[b + 2]
        ws, field, we = short_window(wt, now)
        until_end = max(we - now, 0)
      end
      local after, new = fw_take(keys[ko + i], field, h, h == '1' and 1 or tonumber(h), limit)
      if after == nil or after == 'over' then
        give_back(keys, ko, a, ao, now, i - 1, first)
        return nil
      end
      if new then
        first = first or {}
        first[i] = ws
      end
      out[i * 2], out[i * 2 + 1] = limit - after, until_end
    end
  end
  -- First takes: what else each key holds, all read before anything is deleted.
  local ended = {}
  for i = 1, first and n or 0 do
    local fws = first[i]
    if fws ~= nil then
      local other = fw_ended(keys[ko + i], field_text(fws), fws)
      if other == nil then
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
      local b = ao + i * 4
      local _, field, we = short_window(a[b + 2], now)
      -- A first take's count is its hits, stored plus one.
      fw_settle(keys[ko + i], field, tonumber(a[b + 3]) + 1, ended[i], now, we)
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

