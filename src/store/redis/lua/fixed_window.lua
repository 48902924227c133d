-- sluice: fixed_window (src/algorithm/fixed_window.rs): its port, the take counted in place
-- that batch.lua's short layout and plain takes (plain.rs) share, and the entry point of a
-- request of one fixed_window check.
--
-- State (layout v2): a hash of one field, the window's start (us), holding the count plus one
-- (so that a count given back to 0 still marks its window, and HINCRBY on an absent field
-- tells itself apart by its result). A later window wins over an earlier one, whose field
-- stays as a mark (SUPERSEDED, expiry.lua); the key expires GRACE_MS (expiry.lua) after its
-- window's end.

-- Writes a fixed_window key whole: the window `field` at `value` (its count plus one) and,
-- after it, the window it replaced (`superseded`, or none) as a mark, in one HSET after a DEL.
-- The port's write and a window's first take (`fw_settle`) leave a key alike through it.
local function fw_write(key, field, value, superseded)
  redis.call('DEL', key)
  if superseded then
    redis.call('HSET', key, field, value, superseded, SUPERSEDED)
  else
    redis.call('HSET', key, field, value)
  end
end

-- The port (algorithm.lua: read, evaluate, write); state { window_start, count }.
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
    fw_write(key, st[1], st[2] + 1, read and read[1] < st[1] and int(read[1]) or nil)
    redis.call('PEXPIRE', key, ms)
  end

  function fixed_window.evaluate(c, st, f, hits, refund)
    local start, e, until_end = window_of(st and st[1], f)
    local count = 0
    if st ~= nil and st[1] == start then
      count = st[2]
    end
    local allowed, rem, after = true, 0, 0
    if refund then
      after = max(count - hits, 0)
      rem = max(c.limit - after, 0)
    else
      after = min(add(count, hits), max(COUNT_CAP, count))
      allowed = count + hits <= c.limit
      if allowed then
        rem = c.limit - after
      end
    end
    return { allowed = allowed, remaining = rem, reset = until_end, debt_reset = until_end,
      state = { start, after }, expires_at = e }
  end
  return fixed_window
end

-- Gives a take of `hits` in `field` back; a take that made the field (`made`) drops it.
local function fw_give_back(key, field, hits, made)
  if made then
    redis.call('HDEL', key, field)
  else
    redis.call('HINCRBY', key, field, -hits)
  end
end

-- A take of `hits` (its text `h`) counted in place in the window whose field is `field`, by
-- one HINCRBY: the count after it, and whether the field was absent (the window's first take,
-- which stands only once `fw_ended` allows it; its field holds the bare count until the
-- caller's `fw_settle`, in the same call, writes it plus one: no other take counts in it
-- meanwhile, a request's checks being on distinct keys). A take that does not stand is given
-- back and answers nil, or 'over' when it was counted in range but over the limit (rejected on
-- the state it counted on); so is one on a key of another type (pcall: the port fails on it,
-- before anything is written).
local function fw_take(key, field, h, hits, limit)
  local v = redis.pcall('HINCRBY', key, field, h)
  if type(v) ~= 'number' then
    return nil
  end
  local after, first = nil, false
  if v > hits then
    after = v - 1
  elseif v == hits then
    after, first = hits, true
  end
  if after ~= nil and after <= limit and after <= COUNT_CAP then
    return after, first
  end
  fw_give_back(key, field, hits, v == hits)
  if after ~= nil and after <= COUNT_CAP and not first then
    return 'over'
  end
  return nil
end

-- A window's first take drops the window the key held before, if it ended, as the port's
-- write does: what `fw_settle` is to do to `key` besides our `field` (window start `ws`), as
-- { the window before to supersede (or false), the marks of older windows to drop... }; false
-- when the key holds nothing else; nil when the take cannot stand so (another field is a later
-- window, a clock behind; or two windows both count, or a field is not the layout's): the
-- port decides it then.
local function fw_ended(key, field, ws)
  local f = redis.call('HGETALL', key)
  if f[3] == nil then
    return false
  end
  local ended = { false }
  for i = 1, #f, 2 do
    if f[i] ~= field then
      local s, n = tonumber(f[i]), tonumber(f[i + 1])
      if s == nil or n == nil or n < 1 or s >= ws then
        return nil
      end
      if n <= COUNT_CAP + 1 then
        if ended[1] then
          return nil
        end
        ended[1] = f[i]
      else
        ended[#ended + 1] = f[i]
      end
    end
  end
  return ended
end

-- Settles a first take that `fw_ended` allowed (`ended`: its answer): the key left holding our
-- `field` at `value` (its count plus one; nil only when the key holds nothing else and the
-- field its value already) and, after it, the ended window superseded (older marks dropped),
-- with its expiry set to its window's end `we`. A key holding other fields is written whole
-- (`fw_write`), as the port writes it: a window's first take of a key that held the window
-- before costs three calls, where dropping and superseding field by field took five.
local function fw_settle(key, field, value, ended, now, we)
  if ended then
    fw_write(key, field, value, ended[1])
  elseif value ~= nil then
    redis.call('HSET', key, field, value)
  end
  expire(key, we - now)
end

-- The last window start the common case charged, and its field text. In the library these
-- outlive the call, and most calls fall in the window of the one before: the compare saves
-- Redis formatting the number on every HINCRBY.
local last_ws, last_field = nil, nil

-- In the library, a function that keeps each decision's converted values for the batch's
-- repeats of it (functions.lua sets it); nil in a script.
local keep = nil

-- The port, made once (per call in a script).
local fw_port = nil

-- A request of one fixed_window check (epoch-aligned window, no dry run): this function of
-- the key, now and its values as sent (text: limit, window (us, >= 1), hits, flags), answering
-- flags (1 allowed + 2 charged), remaining and reset, as `alone`. A repeat in the library's
-- batch (functions.lua `fixed_window_again`) passes the values already converted after them
-- (limit, hits, mode, ws, we), so none is read again. The commonest take is counted in place
-- (`fw_take`); anything else is the port under the one-check policy (`alone`).
local function fixed_window(key, now, a2, a3, a4, a5, a6, limit, hits, mode, ws, we)
  if limit == nil then
    limit = tonumber(a2)
    -- One hit and mode 0 are the commonest: a compare of interned strings, not a conversion.
    hits = a4 == '1' and 1 or tonumber(a4)
    mode = a5 == '0' and 0 or tonumber(a5)
    ws, we = epoch_window(now, tonumber(a3))
    if keep ~= nil then
      keep(now, a4, limit, hits, mode, ws, we)
    end
  end

  if mode == 0 and hits > 0 then
    -- Numbers reach Redis as '%.17g', exact below 2^53: the field is the text the port writes.
    if ws ~= last_ws then
      last_ws, last_field = ws, string.format('%.17g', ws)
    end
    -- hits as its text: Redis would format the number back into it.
    local after, first = fw_take(key, last_field, a4, hits, limit)
    if after == 'over' then
      return 0, 0, max(we - now, 0)
    elseif after ~= nil then
      if not first then
        return 3, limit - after, we - now
      end
      local ended = fw_ended(key, last_field, ws)
      if ended ~= nil then
        fw_settle(key, last_field, after + 1, ended, now, we)
        return 3, limit - after, we - now
      end
      redis.call('HDEL', key, last_field)
    end
  end

  if fw_port == nil then
    fw_port = new_fixed_window()
  end
  return alone(fw_port, key, { limit = limit, window = we - ws, param = 0 },
    { now = now, wstart = ws, wend = we }, hits, mode)
end
