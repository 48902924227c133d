-- sluice: fixed_window's repeats in the library's batch (library.rs puts this after
-- fixed_window.lua, in the library only: an EVALSHA of fixed_window.lua would make this
-- closure and its upvalues on every call for nothing).
--
-- A batch sends a decision with the script and values of the fast decision before it as '='
-- and its key (a thread's requests mostly hit one rule at one instant). `fixed_window` keeps
-- the values it converted here; `fixed_window_again(key)` decides a repeat from them, with no
-- argument read, tonumber or fmod again.

local k_now, k_a4, k_limit, k_hits, k_mode, k_ws, k_we = 0, '0', 0, 0, 0, 0, 1

-- Called by `fixed_window` once its values are converted: a conversion that fails raises
-- before this, so nothing is kept, and batch then repeats the call whole.
keep = function(now, a4, limit, hits, mode, ws, we)
  k_now, k_a4, k_limit, k_hits, k_mode, k_ws, k_we = now, a4, limit, hits, mode, ws, we
end

local function fixed_window_again(key)
  return fixed_window(key, k_now, nil, nil, k_a4, nil, nil, k_limit, k_hits, k_mode, k_ws, k_we)
end
