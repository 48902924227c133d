-- sluice: the batch function of the library (library.rs puts decide.lua's definitions and each
-- decision script, wrapped as a function of (KEYS, ARGV), above this): the decisions a
-- serving thread queued in one scheduler tick, each decided in turn in one FCALL, so Redis
-- parses, dispatches and answers one command for all of them (what a script costs per call is
-- paid once per batch).
--
--   keys   every decision's KEYS, one after another
--   args   count, then per decision: script code (SUBS), its number of keys, its number of
--          arguments, its ARGV
--
-- Reply: one element per decision, its script's reply, or its error (a decision's error does
-- not fail the others: each is its own request). Decisions that read the Redis clock share
-- one TIME: a batch decides at one instant, as one script does.

-- Above this, library.rs defines SUBS (the scripts by code) and NOW_AT (where each reads
-- `now`, '' for the Redis clock); below it, it registers each script and `batch`.

local function batch(keys, args)
  local n = tonumber(args[1])
  local out = {}
  local ka, aa = 0, 1
  local now = nil
  for i = 1, n do
    local code = tonumber(args[aa + 1])
    local nk = tonumber(args[aa + 2])
    local na = tonumber(args[aa + 3])
    aa = aa + 3
    local k, a = {}, {}
    for j = 1, nk do
      k[j] = keys[ka + j]
    end
    for j = 1, na do
      a[j] = args[aa + j]
    end
    ka = ka + nk
    aa = aa + na
    local sub = SUBS[code]
    if sub == nil then
      out[i] = { err = 'ERR sluice: unknown script code ' .. tostring(args[aa - na - 2]) }
    else
      local at = NOW_AT[code]
      if a[at] == '' then
        if now == nil then
          local t = redis.call('TIME')
          -- A number, not its text: tostring keeps 14 digits (100 us at today's times).
          now = tonumber(t[1]) * 1000000 + tonumber(t[2])
        end
        a[at] = now
      end
      local ok, r = pcall(sub, k, a)
      if ok then
        out[i] = r
      elseif type(r) == 'table' and r.err ~= nil then
        out[i] = r
      else
        out[i] = { err = 'ERR ' .. tostring(r) }
      end
    end
  end
  return out
end
