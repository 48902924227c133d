-- sluice: exact integer division, for every algorithm's port (src/store/redis/script/mod.rs
-- puts this file before algorithm.lua).

-- A global is looked up in the environment on every use (in Redis, behind the table that guards
-- it), a local is not: the functions every decision calls keep their library functions in
-- locals, set on first use (a function library is loaded where `math` and `bit` are not
-- defined yet).
local floor = nil

-- floor(a / b) for exact integers, b > 0: the double quotient may round to the next integer
-- (ALGORITHMS.md, "Exact arithmetic"), so correct it by one either way.
local function fdiv(a, b)
  if floor == nil then
    floor = math.floor
  end
  local q = floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

-- ceil(a / b) for a >= 0, b > 0.
local function cdiv(a, b)
  local q = fdiv(a, b)
  if q * b < a then
    q = q + 1
  end
  return q
end
