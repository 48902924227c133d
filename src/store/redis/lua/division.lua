-- sluice: exact integer division, for every algorithm's port (src/store/redis/script/mod.rs
-- puts this file before algorithm.lua).

-- floor(a / b) for exact integers, b > 0: the double quotient may round to the next integer
-- (ALGORITHMS.md, "Exact arithmetic"), so correct it by one either way.
local function fdiv(a, b)
  local q = math.floor(a / b)
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
