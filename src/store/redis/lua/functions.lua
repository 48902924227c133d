-- sluice: the batch function of the library (library.rs puts every other file's definitions,
-- batch.lua's `decide`, each lone entry point and the tables below above this): the decisions a serving thread
-- queued in one scheduler tick, each decided in turn in one FCALL, so Redis parses,
-- dispatches and answers one command for all of them (what a script costs per call is paid
-- once per batch).
--
--   keys   every decision's KEYS, one after another
--   args   count, then per decision its script's code and:
--            a fast path (FAST): its ARGV (ARGC of them: now, then its own), its one key
--            batch.lua (WHOLE): its number of keys, its number of arguments, its ARGV
--            (its short layout, scope 'fixed', is first tried in place by SHORT)
--          or, in place of a code, '=': a fast path's decision with the script and values
--          (now included) of the fast path's decision before it in the batch, its one key
--
-- A fast path is called with its values as they are (no KEYS/ARGV tables are built per
-- decision) and answers flat, so the reply is one array:
--
--   [1]    the Redis clock (us) the decisions given '' for now were decided at, or 0
--   then per decision: a fast path's three integers (flags, remaining, reset), or one
--          error; batch.lua's whole reply (one array), or one error
--
-- A repeat of fixed_window (code '=' after one) is decided by `fixed_window_again(key)`, from
-- the values its decision before kept here (fixed_window.lua's `keep` hook, set below: only
-- the library has it, a script would make its closure on every call for nothing).
--
-- A decision's error does not fail the others: each is its own request. Decisions that read
-- the Redis clock share one TIME: a batch decides at one instant, as one script does.

local k_now, k_a4, k_limit, k_hits, k_mode, k_ws, k_we = 0, '0', 0, 0, 0, 0, 1

-- Called by `fixed_window` once its values are converted: a conversion that fails raises
-- before this, so nothing is kept, and batch then repeats the call whole.
keep = function(now, a4, limit, hits, mode, ws, we)
  k_now, k_a4, k_limit, k_hits, k_mode, k_ws, k_we = now, a4, limit, hits, mode, ws, we
end

local function fixed_window_again(key)
  return fixed_window(key, k_now, nil, nil, k_a4, nil, nil, k_limit, k_hits, k_mode, k_ws, k_we)
end

-- The tables of script codes (FAST, AGAIN, ARGC, WHOLE, NOW_AT, SHORT): library.rs puts them
-- in place of the next line.
-- sluice:tables

local function batch(keys, args)
  local n = tonumber(args[1])
  local out = { 0 }
  local o = 1
  local ka, aa = 0, 1
  local clock = nil
  -- The last fast path's decision: its function, where its values are, its now, and its
  -- `_again` (the decision with those values kept, for a key alone) where it has one.
  local last, last_at, last_now, last_again = nil, nil, nil, nil
  for _ = 1, n do
    local code = args[aa + 1]
    local fast = FAST[code]
    local ok, r, rem, reset
    if code == '=' and last ~= nil then
      fast = last
      if last_again ~= nil then
        ok, r, rem, reset = pcall(last_again, keys[ka + 1])
      else
        ok, r, rem, reset = pcall(last, keys[ka + 1], last_now, args[last_at + 1],
          args[last_at + 2], args[last_at + 3], args[last_at + 4], args[last_at + 5])
      end
      ka = ka + 1
      aa = aa + 1
    else
      local now_at = ARGC[code] and 1 or NOW_AT[code]
      if now_at == nil then
        -- Our own encoder wrote it: nothing after it can be read right.
        return { err = 'ERR sluice: unknown script code ' .. tostring(code) }
      end
      local at = aa + 1 + (fast and 0 or 2) + now_at
      if args[at] == '' then
        if clock == nil then
          local t = redis.call('TIME')
          -- A number, not its text: tostring keeps 14 digits (100 us at today's times).
          clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
          out[1] = clock
        end
      end
      if fast ~= nil then
        local now = clock
        if args[at] ~= '' then
          now = tonumber(args[at])
        end
        ok, r, rem, reset = pcall(fast, keys[ka + 1], now, args[at + 1], args[at + 2],
          args[at + 3], args[at + 4], args[at + 5])
        -- A call that failed may have failed before keeping its values: its repeats are
        -- called whole, as it was.
        last, last_at, last_now, last_again = fast, at, now, ok and AGAIN[code] or nil
        ka = ka + 1
        aa = aa + 1 + ARGC[code]
      else
        local nk = tonumber(args[aa + 2])
        local na = tonumber(args[aa + 3])
        aa = aa + 3
        local short = SHORT[code]
        ok, r = true, nil
        if short ~= nil and args[aa + 1] == 'fixed' then
          -- batch.lua's short layout, read in place; nil: the general path decides.
          local now = clock
          if args[aa + 2] ~= '' then
            now = tonumber(args[aa + 2])
          end
          ok, r = pcall(short, keys, ka, args, aa, now, nk)
        end
        if ok and r == nil then
          local k, a = {}, {}
          for j = 1, nk do
            k[j] = keys[ka + j]
          end
          for j = 1, na do
            a[j] = args[aa + j]
          end
          if a[now_at] == '' then
            a[now_at] = clock
          end
          ok, r = pcall(WHOLE[code], k, a)
        end
        ka = ka + nk
        aa = aa + na
      end
    end
    if not ok then
      if type(r) == 'table' and r.err ~= nil then
        out[o + 1] = r
      else
        out[o + 1] = { err = 'ERR ' .. tostring(r) }
      end
      o = o + 1
    elseif fast ~= nil then
      out[o + 1], out[o + 2], out[o + 3] = r, rem, reset
      o = o + 3
    else
      out[o + 1] = r
      o = o + 1
    end
  end
  return out
end
