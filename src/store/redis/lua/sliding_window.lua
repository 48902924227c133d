-- sluice: sliding_window (src/algorithm/sliding_window.rs): its port, and the entry point of a
-- request of one sliding_window check.
--
-- State: the string 'head c0 c1 ...', the index of the newest sub-window (floor(t / sub),
-- sub = max(floor(window / precision), 1)) and the counts of it and of the precision
-- sub-windows before it, newest first, trailing zeros left out. Anything else, or more than
-- precision + 1 counts, counts as no state. The key expires GRACE_MS (expiry.lua) after the
-- last counted hit has left the window.

-- The port (algorithm.lua: read, evaluate, write); state { head, counts }.
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

-- A request of one sliding_window check (no dry run): this function of the key, now and its
-- values as sent (text: limit, window (us, >= 1), hits, flags, precision), answering flags
-- (1 allowed + 2 charged), remaining and reset, as `alone` (alone.lua) over the port would,
-- on the same state, leaving the same state: one GET, at most one SET. Still the port's
-- arithmetic written out a second time (the parity tests hold the two together): `alone` over
-- `new_sliding_window()` costs about twice the Lua time per call (the port's closures and
-- tables of counts).
local function sliding_window(key, now, a2, a3, a4, a5, a6)
  -- (x - 0: the conversion tonumber makes, without its call; - 0 keeps a -0 as tonumber does.)
  local limit = a2 - 0
  -- One hit and mode 0 are the commonest: a compare of interned strings, not a conversion.
  local hits = a4 == '1' and 1 or a4 - 0
  local mode = a5 == '0' and 0 or a5 - 0
  local p = a6 - 0
  if not (p > 1) then
    p = 1
  end

  -- sub and i = floor(now / sub), now's sub-window, divided exactly (division.lua).
  local w = a3 - 0
  local sub = fdiv(w, p)
  if not (sub > 1) then
    sub = 1
  end
  local window = sub * p
  local i = fdiv(now, sub)

  -- The state, shifted to now's sub-window as it is read. t[1]: the head as written, if kept;
  -- t[j + 1]: the count of sub-window head - j (j = 0 .. p), as text (written back as read) or
  -- a number, set up to `last`, the last non-zero one (1: none); `first` the first (nil: none);
  -- `count` their sum (in the port's order: newest first); n0 the number in t[2], if known.
  local t = { nil, nil, nil, nil }
  local head, last, first, count, n0 = i, 1, nil, 0, nil
  local raw = redis.call('GET', key)
  if raw then
    -- the port's `ints`: tokens '-?%d+' between white space, at least one. sluice writes digits
    -- and single spaces, no leading zeros ('plain': such tokens below 1e15 are exact, written
    -- back as read), and its commonest state starts with a non-zero count: one match takes the
    -- head, that count and the rest. Anything else takes the full check and is re-printed.
    local tok, c0, rest = string.match(raw, '^([1-9]%d*) ([1-9]%d*)([ 0-9]*)$')
    local plain, ok, it = true, true, nil
    if tok ~= nil then
      if rest ~= '' then
        it = string.gmatch(rest, '%S+')
      end
    else
      plain = string.find(raw, '^[1-9][ 0-9]*$') ~= nil
      ok = plain or (string.find(raw, '[^%s%d%-]') == nil and string.find(raw, '%d%-') == nil
        and string.find(raw, '%-%D') == nil and string.find(raw, '%-$') == nil)
      it = string.gmatch(raw, '%S+')
      tok = ok and it()
    end
    if tok then
      local sh = tok - 0
      if sh > i then
        -- A clock behind the state's: it counts into the state's newest sub-window.
        head = sh
      end
      local shift = head - sh
      -- At p + 1 (the port's cap) every count has left the window: as no state at all.
      if shift < p + 1 then
        if plain and head == sh and #tok < 16 then
          t[1] = tok
        end
        local k, room = 0, p + 1 - shift
        if c0 ~= nil then
          -- The matched first count (> 0): it stays (room >= 1).
          k = 1
          last = shift + 2
          first, count = last, c0 - 0
          if #c0 < 16 then
            t[last] = c0
          else
            t[last] = string.format('%.0f', count)
          end
          if shift == 0 then
            n0 = count
          end
        end
        if it ~= nil then
          for c in it do
            k = k + 1
            if k <= room then
              local v = c - 0
              if v < 0 then
                ok = false
                break
              end
              local j = k + shift + 1
              if v > 0 then
                count = count + v
                last = j
                if first == nil then
                  first = j
                end
              end
              if plain and (#c == 1 or (string.byte(c) ~= 48 and #c < 16)) then
                t[j] = c
              else
                t[j] = string.format('%.0f', v)
              end
            elseif k > p + 1 or (not plain and c - 0 < 0) then
              -- More than p + 1 counts, or a negative one: no state.
              ok = false
              break
            end
          end
        end
        if not ok then
          head, last, first, count, n0 = i, 1, nil, 0, nil
          t = {}
        elseif last > 1 then
          for j = 2, shift + 1 do
            t[j] = '0'
          end
        end
      end
    end
  end

  local flags, rem, reset
  local write = hits > 0
  if has(mode, FLAG_REFUND) then
    -- Refund: taken back from the newest sub-windows first, never below zero (each count as
    -- the port does it: a -0 read becomes 0).
    flags = 1
    if write then
      local left, nz = hits, 1
      count, first = 0, nil
      for j = 2, last do
        local v = tonumber(t[j])
        local take = v
        if left < v then
          take = left
        end
        v = v - take
        t[j] = v
        left = left - take
        count = count + v
        if v > 0 then
          nz = j
          if first == nil then
            first = j
          end
        end
      end
      last = nz
    end
    rem = limit - count
    if not (rem > 0) then
      rem = 0
    end
  else
    local allowed = count + hits <= limit
    -- Not charged (so not written): rejected, unless charged always.
    write = write and (allowed or has(mode, FLAG_ALWAYS))
    local add = 0
    if write then
      -- Charge into now's sub-window, the total saturating at COUNT_CAP.
      add = COUNT_CAP - count
      if not (add > 0) then
        add = 0
      end
      if hits < add then
        add = hits
      end
      if n0 == nil then
        n0 = tonumber(t[2] or 0)
      end
      local v = n0 + add
      if v < 1e15 then
        t[2] = string.format('%d', v)
      else
        t[2] = string.format('%.0f', v)
      end
      if v > 0 then
        first = 2
        if last < 2 then
          last = 2
        end
      end
    end
    if allowed then
      flags = 1
      rem = limit - (count + add)
    else
      -- Rejected: reset is when hits more would fit, the oldest sub-windows leaving first (on
      -- the charged state if charged: it waits out its own debt, batch.rs `verdict`), or when
      -- every counted hit has (below).
      flags, rem = 0, 0
      if hits <= limit then
        local total = count
        if write then
          total = 0
          for j = 2, last do
            total = total + tonumber(t[j])
          end
        end
        if total + hits <= limit then
          reset = 0
        else
          for j = last, 3, -1 do
            total = total - tonumber(t[j])
            if total + hits <= limit then
              -- Fits once sub-window head - (j - 3) - 1 has left (the port's operations, in
              -- its order).
              reset = (head - (j - 3) - 1 + 1) * sub + window - now
              if not (reset > 0) then
                reset = 0
              end
              break
            end
          end
        end
      end
    end
  end

  -- Until every counted hit has left the window: when the newest non-zero sub-window does.
  local u = 0
  if first ~= nil then
    u = (head - (first - 2) + 1) * sub + window - now
    if not (u > 0) then
      u = 0
    end
  end
  if reset == nil then
    reset = u
  end

  if write then
    -- Numbers below 1e14 print exactly in concat's '%.14g', as in the port's '%.0f'.
    if t[1] == nil then
      if head < 1e14 and head > -1e14 then
        t[1] = head
      else
        t[1] = string.format('%.0f', head)
      end
    end
    if not (count + hits < 1e14) then
      for j = 2, last do
        if type(t[j]) == 'number' then
          t[j] = string.format('%.0f', t[j])
        end
      end
    end
    local s
    if last == 2 then
      s = t[1] .. ' ' .. t[2]
    elseif last == 1 then
      s = t[1] .. ''
    else
      s = table.concat(t, ' ', 1, last)
    end
    redis.call('SET', key, s, 'PX', ttl_ms(now + u - now))
    flags = flags + 2
  end
  return flags, rem, reset
end

