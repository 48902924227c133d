-- sluice: a plain take that sluice could not decide from its reply alone
-- (src/store/redis/plain.rs: a one-hit fixed_window take sent as `HINCRBY key <window start> 1`,
-- with no script). Library only, after fixed_window.lua.
--
--   KEYS[1]   the key
--   ARGV[1]   'retake': the take ran in another window than Redis' (a clock read across a
--             window's edge): its hit is given back, then it is decided as fixed_window.lua
--             would. 'settle': it found its window's field absent and made it (count + 1 = 1,
--             nothing counted; takes since may have counted on it): what a window's first take
--             does (`fw_settle`: the window before superseded, older ones dropped, the expiry
--             set), then it is decided. 'forget':
--             settle's housekeeping alone (a settle cut off by a dropped connection, sent on
--             the next one so that no key is left without an expiry).
--             'decide': a peek (an HGET of a key seen at its limit) that could not reject:
--             nothing was written, so it is decided as fixed_window.lua would.
--   ARGV[2]   the window start it was sent for (the field)
--   ARGV[3]   limit      ARGV[4] window (us)
--
-- Reply: as fixed_window's entry point, { now, flags, remaining, reset }.

local function fixed_window_mend(KEYS, ARGV)
  local key, what, field = KEYS[1], ARGV[1], ARGV[2]
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  -- 'forget': a settle whose caller was told its call may have run (its connection dropped
  -- first, link.rs `carry`): the housekeeping only (the expiry set), no decision.
  local decide = true
  if what == 'forget' then
    what, decide = 'settle', false
  end
  if what == 'decide' then
    -- A read: nothing to undo.
  elseif what == 'retake' then
    if redis.call('HINCRBY', key, field, -1) <= 0 then
      redis.call('HDEL', key, field)
    end
  elseif what == 'settle' then
    -- A window's first take, made outside a script: fixed_window.lua's rules, applied after
    -- the fact. Takes since may have counted on our field, so it stays, superseded if a later
    -- window wins; else the newest earlier window is superseded (`fw_settle`: a take still
    -- counting in it is sent to the script, not to a fresh count). Anything older is dropped,
    -- as the port's write leaves a key.
    local ws = tonumber(field)
    local f = redis.call('HGETALL', key)
    local ours, later, newest, newest_s, older = false, false, false, nil, {}
    for i = 1, #f, 2 do
      if f[i] == field then
        ours = f[i + 1]
      else
        local s = tonumber(f[i])
        if s ~= nil and s > ws then
          later = true
        elseif s ~= nil and (newest_s == nil or s > newest_s) then
          if newest then
            older[#older + 1] = newest
          end
          newest, newest_s = f[i], s
        else
          older[#older + 1] = f[i]
        end
      end
    end
    if newest and later then
      older[#older + 1] = newest
    end
    for _, o in ipairs(older) do
      redis.call('HDEL', key, o)
    end
    if later then
      -- A later window, written by a sluice on its own clock: it wins, as in fixed_window.lua.
      -- Ours is superseded rather than dropped: takes may still be counting in it.
      if ours then
        supersede(key, field)
      end
    elseif ours then
      -- Our field keeps its value (takes since counted in it); rewritten only beside the
      -- window it supersedes.
      fw_settle(key, field, newest and ours or nil, newest and { newest } or false, now,
        ws + tonumber(ARGV[4]))
    end
  else
    return { err = 'ERR sluice: unknown mend ' .. tostring(what) }
  end
  if not decide then
    return { now, 0, 0, 0 }
  end
  return { now, fixed_window(key, now, ARGV[3], ARGV[4], '1', '0', nil) }
end
