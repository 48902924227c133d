-- sluice: one request's rate-limit decision, atomically (check and charge in one script).
--
-- A port of src/store/batch.rs (the charging policy) over ports of src/algorithm/* (the
-- arithmetic); every number is an integer below 2^53, so Lua's doubles agree with Rust's
-- integers bit for bit. The argument layout is written by src/store/redis/script.rs:
--
--   KEYS       the distinct keys of the checks
--   ARGV[1]    scope: 'all'  the checks are the whole request: the exact batch policy
--                     'part' the checks are some descriptors of a request whose other
--                            descriptors live elsewhere (Redis Cluster): admission assumes the
--                            descriptors not seen here pass; the caller undoes what it must
--                     'undo' give back the hits of every check (they were charged by 'part')
--   ARGV[2]    now in microseconds, or '' to read the Redis clock (TIME)
--   ARGV[3]    number of checks, then FIELDS values per check:
--              key index (into KEYS), algorithm code, limit, window (us), hits, refund (0/1),
--              charge always (0/1), group, quota (0/1), window start, window end (both '' unless
--              the caller computed the window, e.g. a calendar window)
--
-- Reply: { now, then per check: allowed, remaining, reset (us), charged, allowed in the first
-- pass } with booleans as 0/1.

local FIELDS = 11
local MAX = 9007199254740991 -- 2^53 - 1: Rust saturates at u64/i64 bounds, Lua here
-- Stored state lives this much past its expiry: a sluice whose clock runs behind the one that
-- wrote it must still see it (losing it early would grant quota).
local GRACE_MS = 1000

local function add(a, b)
  local s = a + b
  if s > MAX then
    return MAX
  end
  return s
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

---------------------------------------------------------------------------------------------
-- Algorithms: each decodes its stored string, evaluates (limit, state, frame, ask) exactly as
-- its Rust twin, and encodes the charged state. Outcome: { allowed, remaining, reset, state,
-- expires_at } as Rust's `Outcome`.
---------------------------------------------------------------------------------------------

-- fixed_window (src/algorithm/fixed_window.rs); state 'window_start count'.
local fixed_window = {}

function fixed_window.decode(raw)
  local ws, count = string.match(raw, '^(%-?%d+) (%d+)$')
  if ws == nil then
    return nil
  end
  return { tonumber(ws), tonumber(count) }
end

function fixed_window.encode(st)
  return int(st[1]) .. ' ' .. int(st[2])
end

function fixed_window.evaluate(c, st, f, hits, refund)
  local len = f.wend - f.wstart
  -- A state from a later window: another instance's clock runs ahead; keep counting there.
  local start, count
  if st ~= nil and st[1] >= f.wstart then
    start, count = st[1], st[2]
  else
    start, count = f.wstart, 0
  end
  local e
  if start == f.wstart then
    e = f.wend
  else
    e = add(start, len)
  end
  local until_end = e - f.now
  if until_end < 0 then
    until_end = 0
  end
  if refund then
    count = count - hits
    if count < 0 then
      count = 0
    end
    local rem = c.limit - count
    if rem < 0 then
      rem = 0
    end
    return { allowed = true, remaining = rem, reset = until_end, state = { start, count }, expires_at = e }
  end
  local after = add(count, hits)
  local allowed = count + hits <= c.limit
  local rem = 0
  if allowed then
    rem = c.limit - after
  end
  return { allowed = allowed, remaining = rem, reset = until_end, state = { start, after }, expires_at = e }
end

-- Algorithm codes: src/store/redis/script.rs `algorithm_code`.
local ALGORITHMS = { [1] = fixed_window }

---------------------------------------------------------------------------------------------
-- Arguments
---------------------------------------------------------------------------------------------

local scope = ARGV[1]
local now = num(ARGV[2])
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local n = tonumber(ARGV[3])
local checks = {}
for i = 1, n do
  local b = 3 + (i - 1) * FIELDS
  local c = {
    k = tonumber(ARGV[b + 1]),
    algo = ALGORITHMS[tonumber(ARGV[b + 2])],
    limit = tonumber(ARGV[b + 3]),
    window = tonumber(ARGV[b + 4]),
    hits = tonumber(ARGV[b + 5]),
    refund = ARGV[b + 6] == '1',
    always = ARGV[b + 7] == '1',
    group = tonumber(ARGV[b + 8]),
    quota = ARGV[b + 9] == '1',
  }
  if c.algo == nil then
    return redis.error_reply('sluice: unknown algorithm code ' .. tostring(ARGV[b + 2]))
  end
  -- The window of `now` (src/algorithm/mod.rs `Frame::epoch_aligned`) unless given.
  local ws, we = num(ARGV[b + 10]), num(ARGV[b + 11])
  if ws == nil or we == nil then
    local w = c.window
    if w < 1 then
      w = 1
    end
    -- fmod is exact; made Euclidean for times before the epoch.
    local r = math.fmod(now, w)
    if r < 0 then
      r = r + w
    end
    ws = now - r
    we = add(ws, w)
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
    local raw = redis.call('GET', KEYS[c.k])
    s = false
    if raw then
      s = c.algo.decode(raw) or false
    end
    stored[c.k] = s
  end
  return s or nil
end

local function put(c, o)
  local ttl = math.ceil((o.expires_at - now) / 1000)
  if ttl < 1 then
    ttl = 1
  end
  redis.call('SET', KEYS[c.k], c.algo.encode(o.state), 'PX', int(ttl + GRACE_MS))
end

local function evaluate(c, st, hits, refund)
  return c.algo.evaluate(c, st, c.frame, hits, refund)
end

local function takes_effect(c)
  return c.hits > 0
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
local function push(allowed, remaining, reset, charged, first_allowed)
  local function b(x)
    if x then
      return 1
    end
    return 0
  end
  reply[#reply + 1] = b(allowed)
  reply[#reply + 1] = remaining
  reply[#reply + 1] = reset
  reply[#reply + 1] = b(charged)
  reply[#reply + 1] = b(first_allowed)
end

---------------------------------------------------------------------------------------------
-- 'undo': give back what a 'part' call charged (Redis Cluster, request rejected elsewhere).
-- Each verdict is what the check shows uncharged: its allowance without this request.
---------------------------------------------------------------------------------------------

if scope == 'undo' then
  local current = {}
  for _, c in ipairs(checks) do
    local st = current[c.k]
    if st == nil then
      st = stored_state(c)
    end
    local o = evaluate(c, st, c.hits, true)
    put(c, o)
    current[c.k] = o.state
  end
  for _, c in ipairs(checks) do
    local peek = evaluate(c, current[c.k], 0, false)
    push(true, peek.remaining, peek.reset, false, true)
  end
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
    push(o.allowed, o.remaining, o.reset, takes_effect(c), true)
  end
  return reply
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
    push(after.allowed, after.remaining, after.reset, takes_effect(c), before.allowed)
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
return reply
