-- sluice: distinct (src/algorithm/distinct.rs), for batch.lua (no request of one distinct
-- check has a path of its own).

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
