--! keys: variadic
--! Group commit of checks of windows aligned to the clock: n checks of ONE limiter (same
--! limit), each on its own counter (the window's number in the key, each with its TTL), in
--! one call. Each check is exactly fixed_window_aligned's on its key (same steps, writes and
--! reply), so a key's outcome is the one it would give; the checks run in order, atomically
--! together. Server cost: one script call for n checks instead of n.
--! KEYS[1..n] = window counters (one slot on a Cluster). ARGV[1] = limit, then either ONE TTL
--! in ms for every new counter (ARGV[2]) or each check's (ARGV[2..n+1]), then (optional, all
--! or none; none: each 1) each check's cost. #ARGV tells the forms apart: 2 (one TTL),
--! n + 2 (one TTL and the costs), n + 1 (the TTLs), 2n + 1 (the TTLs and the costs); for
--! n = 1 the forms that share a count mean the same. Each limit, TTL and cost is an integer
--! 1..=2^53-1, the cost the string '1' or a canonical decimal integer. A TTL is formatted
--! only where a new counter gets it.
--! Checked before anything is written (else an error for the whole call, nothing written):
--! the limit, #ARGV (one of the forms above), every TTL and cost.
--! Reply: an array of n elements, element i = fixed_window_aligned's reply for KEYS[i]
--! (one integer), or its error for that key as a STRING element holding the error text
--! (REDKIT_NOPERM, REDKIT_DATA, WRONGTYPE ...; not an error element, which clients such as
--! redis-rs turn into an error for the whole reply): a key answered with an error has
--! nothing written, and the other keys' checks run as usual. Every write after a key's first
--! is one the ACL and memory checks already allowed, so no command fails after a write.
local MAX = 9007199254740991
local n = #KEYS
local limit = tonumber(ARGV[1])
local sent = #ARGV
if not (limit and limit >= 1 and limit <= MAX and limit % 1 == 0)
    or (sent ~= 2 and sent ~= n + 2 and sent ~= n + 1 and sent ~= 2 * n + 1) then
  return redis.error_reply('REDKIT_INPUT limit, ttl and cost must be integers 1..=2^53-1')
end
-- Arguments as numbers, checked before the first write; a cost of '1' needs no conversion.
-- No costs sent: each 1 (nil in `costs` below stands for 1). One TTL: `ttls` is empty and
-- `one_ttl` holds it. A TTL is kept as sent and formatted where a new counter gets it.
local one = sent == 2 or sent == n + 2
local ttls, costs, one_ttl = {}, {}, nil
local first_cost = 2
if one then
  local t = tonumber(ARGV[2])
  if not (t and t >= 1 and t <= MAX and t % 1 == 0) then
    return redis.error_reply('REDKIT_INPUT limit, ttl and cost must be integers 1..=2^53-1')
  end
  one_ttl = ARGV[2]
else
  first_cost = n + 1
  for i = 1, n do
    local t = tonumber(ARGV[1 + i])
    if not (t and t >= 1 and t <= MAX and t % 1 == 0) then
      return redis.error_reply('REDKIT_INPUT limit, ttl and cost must be integers 1..=2^53-1')
    end
    ttls[i] = ARGV[1 + i]
  end
end
local with_costs = sent > first_cost
if with_costs then
  for i = 1, n do
    local c = ARGV[first_cost + i]
    if c == '1' then
      costs[i] = 1
    elseif #c <= 16 and string.find(c, '^[1-9]%d*$') and tonumber(c) <= MAX then
      costs[i] = tonumber(c)
    else
      return redis.error_reply('REDKIT_INPUT cost must be a canonical decimal integer 1..=2^53-1')
    end
  end
end
local bad_data = 'REDKIT_DATA window counter is not a non-negative integer'

-- A cost above the limit: never counted, the counter is only read.
local function over(key)
  local raw = redis.pcall('GET', key)
  if type(raw) == 'table' then
    if string.find(raw.err, "can't run", 1, true) then
      return 'REDKIT_NOPERM GET on the window counter'
    end
    return raw.err
  end
  local c = 0
  if raw then
    local canonical = raw == '0' or (string.find(raw, '^[1-9]%d*$')
        and (#raw < 19 or (#raw == 19 and raw <= '9223372036854775807')))
    if not canonical then
      return bad_data
    end
    c = tonumber(raw)
    if c > MAX then
      c = MAX
    end
  end
  return -c - 1
end

-- The steps after the common path, for a count INCRBY answered (or its error).
local function general(key, cost_arg, cost, ttl, count)
  if type(count) == 'table' then
    local err = count.err
    if string.find(err, "can't run", 1, true) then
      return 'REDKIT_NOPERM INCRBY on the window counter'
    end
    if string.find(err, 'overflow', 1, true) then
      return -MAX - 1
    end
    if string.find(err, 'not an integer', 1, true) then
      return bad_data
    end
    return err
  end
  if count == cost then
    -- A new counter (or one holding 0): it gets its TTL.
    redis.call('PEXPIRE', key, string.format('%d', tonumber(ttl)))
    return count
  end
  -- Not counted: put back what this call added.
  redis.call('INCRBY', key, '-' .. cost_arg)
  if count < cost then
    return bad_data
  end
  count = count - cost
  if count > MAX then
    count = MAX
  end
  return -count - 1
end

local out = {}
for i = 1, n do
  local key, cost, ttl = KEYS[i], costs[i] or 1, one_ttl or ttls[i]
  local cost_arg = with_costs and ARGV[first_cost + i] or '1'
  local reply
  if cost > limit then
    reply = over(key)
  elseif not redis.acl_check_cmd('PEXPIRE', key, ttl) then
    reply = 'REDKIT_NOPERM PEXPIRE on the window counter'
  else
    local count = redis.pcall('INCRBY', key, cost_arg)
    if type(count) == 'number' and count > cost and count <= limit then
      -- The common path: a counter with room left.
      reply = count
    else
      reply = general(key, cost_arg, cost, ttl, count)
    end
  end
  out[i] = reply
end
return out
