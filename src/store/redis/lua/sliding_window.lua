-- sluice: sliding_window (src/algorithm/sliding_window.rs): its evaluation written once
-- (`sw_evaluate`), the port batch.lua uses over it, and the entry point of a request of one
-- sliding_window check, the same evaluation without the port's tables.
--
-- State: the string 'head c0 c1 ...', the index of the newest sub-window (floor(t / sub),
-- sub = max(floor(window / precision), 1)) and the counts of it and of the precision
-- sub-windows before it, newest first, trailing zeros left out. Anything else, or more than
-- precision + 1 counts, counts as no state. The key expires GRACE_MS (expiry.lua) after the
-- last counted hit has left the window.
--
-- The helpers take the counts and their numbers as arguments rather than being closures over
-- them: a closure made per evaluation cost the lone check about twice its Lua time.

-- The state text as values: the head and a table of the counts, or nil if it is not a state
-- (what algorithm.lua's `ints` accepts, with no negative count, without its table of tokens).
local function sw_decode(raw)
  -- Digits and spaces are what sluice writes; anything else takes the full check of `ints`.
  if string.find(raw, '^[%d ]+$') == nil and (string.find(raw, '[^%s%d%-]') ~= nil
      or string.find(raw, '%d%-') ~= nil or string.find(raw, '%-%D') ~= nil
      or string.find(raw, '%-$') ~= nil) then
    return nil
  end
  local head, counts, n = nil, {}, 0
  for tok in string.gmatch(raw, '%S+') do
    -- (`s - 0`: tonumber(s) without a call; + 0 makes a -0 0, the same number, printed
    -- as sluice writes it.)
    local v = tok - 0 + 0
    if head == nil then
      head = v
    elseif v < 0 then
      return nil
    else
      n = n + 1
      counts[n] = v
    end
  end
  if head == nil then
    return nil
  end
  return head, counts
end

-- The formats of a state of n counts ('%d' and n times ' %d'), made as they are needed.
local SW_FORMAT = {}

-- The state as text: `int` (algorithm.lua) of each value. One format call of '%d's prints the
-- same digits for the integers a state holds (below 2^53, no -0: `sw_decode` reads none) with
-- integer arithmetic, where each number printed as '%.0f' or concat's '%.14g' costs more than
-- a Redis command.
local function sw_text(head, counts)
  local last = #counts
  while last > 0 and counts[last] == 0 do
    last = last - 1
  end
  local plain = last <= 32 and head > -MAX and head < MAX
  for j = 1, last do
    if not (counts[j] < MAX) then
      plain = false
    end
  end
  if plain then
    local fmt = SW_FORMAT[last]
    if fmt == nil then
      fmt = '%d' .. string.rep(' %d', last)
      SW_FORMAT[last] = fmt
    end
    return string.format(fmt, head, unpack(counts, 1, last))
  end
  local parts = { int(head) }
  for j = 1, last do
    parts[#parts + 1] = int(counts[j])
  end
  return table.concat(parts, ' ')
end

local function sw_sum(counts, n)
  local s = 0
  for j = 1, n do
    s = s + counts[j]
  end
  return s
end

-- Until every counted hit has left the window (the newest non-zero sub-window's drop time).
-- counts[1 + j] belongs to sub-window head - j; sub-window k leaves at (k + 1) * sub + window.
local function sw_until_empty(counts, n, head, sub, window, now)
  for j = 1, n do
    if counts[j] > 0 then
      return max((head - (j - 1) + 1) * sub + window - now, 0)
    end
  end
  return 0
end

-- Until `hits` more would fit under `limit`, the oldest sub-windows leaving first.
-- (counts: as `sw_evaluate` makes them, up to their last; n the precision + 1.)
local function sw_retry(counts, n, head, sub, window, now, limit, hits)
  if hits > limit then
    return sw_until_empty(counts, #counts, head, sub, window, now)
  end
  local total = sw_sum(counts, #counts)
  for j = n - 1, 0, -1 do
    if total + hits <= limit then
      if j == n - 1 then
        return 0
      end
      return max((head - j - 1 + 1) * sub + window - now, 0)
    end
    total = total - (counts[j + 1] or 0)
  end
  return sw_until_empty(counts, #counts, head, sub, window, now)
end

-- src/algorithm/sliding_window.rs `evaluate` on values, for the port and the lone entry point
-- alike: the stored state (head0, counts0; nil when absent) -> allowed, remaining, reset,
-- debt_reset, the state after charging (head, counts) and its expiry (algorithm.lua's
-- Outcome, flat). counts0 is not changed unless `own` (the lone check, whose state is its own:
-- in its commonest call, in now's sub-window, the counts are charged in place, not copied).
local function sw_evaluate(limit, w, param, head0, counts0, now, hits, refund, own)
  local p = max(param, 1)
  local n = p + 1
  local sub = max(fdiv(w, p), 1)
  local window = sub * p
  local i = fdiv(now, sub)
  -- counts[1 + j] belongs to sub-window head - j, up to the last one the state reaches (at
  -- least 1, at most n): the rest are 0, and a state's loops stop at its last count.
  local head, counts = i, nil
  if head0 ~= nil and #counts0 <= n then
    head = max(head0, i)
    local shift = min(head - head0, n)
    if own and shift == 0 and counts0[1] ~= nil then
      counts = counts0
    else
      counts = { 0 }
      for j = 1, min(#counts0 + shift, n) do
        if j > shift then
          counts[j] = counts0[j - shift]
        else
          counts[j] = 0
        end
      end
    end
  else
    counts = { 0 }
  end
  local m = #counts

  if refund then
    local left = hits
    for j = 1, m do
      local take = min(left, counts[j])
      counts[j] = counts[j] - take
      left = left - take
    end
    local reset = sw_until_empty(counts, m, head, sub, window, now)
    return true, max(limit - sw_sum(counts, m), 0), reset, reset, head, counts, now + reset
  end

  local count = sw_sum(counts, m)
  local allowed = count + hits <= limit
  local uncharged = 0
  if not allowed then
    uncharged = sw_retry(counts, n, head, sub, window, now, limit, hits)
  end
  -- Charged into now's sub-window, the total saturating at COUNT_CAP (sums stay exact).
  local add = min(hits, max(COUNT_CAP - count, 0))
  counts[1] = counts[1] + add
  local u = sw_until_empty(counts, m, head, sub, window, now)
  if allowed then
    return true, limit - (count + add), u, u, head, counts, now + u
  end
  return false, 0, uncharged, sw_retry(counts, n, head, sub, window, now, limit, hits), head,
    counts, now + u
end

-- The port (algorithm.lua: read, evaluate, write); state { head, counts }.
local function new_sliding_window()
  local sliding_window = {}
  sliding_window.read = function(key) return read_string(sliding_window, key) end
  sliding_window.write = function(key, st, ttl) write_string(sliding_window, key, st, ttl) end

  function sliding_window.decode(raw)
    local head, counts = sw_decode(raw)
    if head == nil then
      return nil
    end
    return { head = head, counts = counts }
  end

  function sliding_window.encode(st)
    return sw_text(st.head, st.counts)
  end

  function sliding_window.evaluate(c, st, f, hits, refund)
    local head0, counts0 = nil, nil
    if st ~= nil then
      head0, counts0 = st.head, st.counts
    end
    local allowed, rem, reset, debt_reset, head, counts, e =
      sw_evaluate(c.limit, c.window, c.param, head0, counts0, f.now, hits, refund)
    return { allowed = allowed, remaining = rem, reset = reset, debt_reset = debt_reset,
      state = { head = head, counts = counts }, expires_at = e }
  end
  return sliding_window
end

-- A request of one sliding_window check (no dry run): this function of the key, now and its
-- values as sent (text: limit, window (us, >= 1), hits, flags, precision), answering flags
-- (1 allowed + 2 charged), remaining and reset: the port's read, evaluation and write under
-- the one-check policy (alone.lua), their values passed as they are.
local function sliding_window(key, now, a2, a3, a4, a5, a6)
  -- One hit and mode 0 are the commonest: a compare of interned strings, not a conversion.
  local hits = a4 == '1' and 1 or a4 - 0
  local mode = a5 == '0' and 0 or a5 - 0
  local raw = redis.call('GET', key)
  local head0, counts0 = nil, nil
  if raw then
    head0, counts0 = sw_decode(raw)
  end
  local allowed, rem, reset, debt_reset, head, counts, e =
    sw_evaluate(a2 - 0, a3 - 0, a6 - 0, head0, counts0, now, hits, has(mode, FLAG_REFUND), true)
  local flags = alone_flags(allowed, hits, mode)
  if flags < 2 then
    return flags, rem, reset
  end
  redis.call('SET', key, sw_text(head, counts), 'PX', ttl_ms(e - now))
  return flags, rem, debt_reset
end
