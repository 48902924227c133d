-- sluice: batch.rs's policy for a whole request of one check (no dry run: that takes
-- batch.lua), which every lone entry point ends in: the check's outcome on its key's state,
-- charged when allowed or forced (a refund, charge-always). What batch.lua's `decide` answers
-- for such a request, without its tables of checks and passes. script/mod.rs puts this file
-- after algorithm.lua.

-- The verdict on an outcome given as values (what a lone entry point gets from its port's
-- evaluation, no table): flags, 1 allowed + 2 charged. Charged (flags >= 2), its state is
-- written and its reset is the outcome's debt_reset: it waits out its own debt (batch.rs
-- `verdict`); else nothing is written and the reset is the outcome's reset.
local function alone_flags(allowed, hits, mode)
  if not (allowed or has(mode, FLAG_REFUND + FLAG_ALWAYS)) then
    return 0
  end
  local flags = allowed and 1 or 0
  if hits == 0 then
    return flags
  end
  return flags + 2
end

-- The same over a port's table interface:
--
--   a      the algorithm's port (`new_<name>()`)
--   c      { limit, window, param }      f   the frame { now, wstart, wend }
--   hits   the hits asked                 mode   the check's flags (expiry.lua)
--
-- Answers flags, remaining and reset (us), as every lone entry point.
local function alone(a, key, c, f, hits, mode)
  local st = a.read(key)
  local o = a.evaluate(c, st, f, hits, has(mode, FLAG_REFUND))
  local flags = alone_flags(o.allowed, hits, mode)
  if flags < 2 then
    return flags, o.remaining, o.reset
  end
  -- batch.lua's `put`: the very state read (nothing changed) is not written again.
  if o.state ~= st then
    a.write(key, o.state, ttl_ms(o.expires_at - f.now), st)
  end
  return flags, o.remaining, o.debt_reset
end
