-- sluice: concurrency (src/algorithm/concurrency.rs), for batch.lua (no request of one
-- concurrency check has a path of its own).

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
