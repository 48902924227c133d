-- sluice: batch.rs's policy for a whole request of one check (no dry run: that takes
-- batch.lua), which fixed_window's lone entry point ends in (the others, `sliding_log`,
-- `bucket` and `sliding_window`, still write the one-check case out: see each): the check's
-- outcome on its key's state, charged when allowed or forced (a refund, charge-always). What batch.lua's `decide` answers for such a request, without its
-- tables of checks and passes. script/mod.rs puts this file after algorithm.lua.
--
--   a      the algorithm's port (`new_<name>()`)
--   c      { limit, window, param }      f   the frame { now, wstart, wend }
--   hits   the hits asked                 mode   the check's flags (expiry.lua)
--
-- Answers flags (1 allowed + 2 charged), remaining and reset (us), as every lone entry point.
local function alone(a, key, c, f, hits, mode)
  local st = a.read(key)
  local refund = has(mode, FLAG_REFUND)
  local o = a.evaluate(c, st, f, hits, refund)
  if not (o.allowed or refund or has(mode, FLAG_ALWAYS)) then
    return 0, o.remaining, o.reset
  end
  local flags = o.allowed and 1 or 0
  if hits == 0 then
    return flags, o.remaining, o.reset
  end
  -- batch.lua's `put`: the very state read (nothing changed) is not written again.
  if o.state ~= st then
    a.write(key, o.state, ttl_ms(o.expires_at - f.now), st)
  end
  -- Charged: it waits out its own debt (batch.rs `verdict`).
  return flags + 2, o.remaining, o.debt_reset
end
