--! keys: variadic
--! Group commit of fixed-window checks: n checks of ONE limiter (same limit and window), each
--! on its own counter, in one call. Each check is exactly fixed_window's on its key (same
--! steps, writes and reply), so a key's outcome is the one fixed_window would give; the
--! checks run in order, atomically together. Server cost: one script call for n checks
--! instead of n.
--! KEYS[1..n] = window counters (one slot on a Cluster). ARGV[1] = limit, ARGV[2] = window in
--! ms, ARGV[3..n+2] (optional, all or none; none: each 1) = the checks' costs: the limit and
--! the window as fixed_window reads them, each cost the string '1' or a canonical decimal
--! integer 1..=2^53-1.
--! Checked before anything is written (else an error for the whole call, nothing written):
--! the limit, #ARGV = 2 or n + 2, every cost.
--! Reply: an array of n elements, element i = fixed_window's reply for KEYS[i] with cost
--! ARGV[2+i] (the packed integer, or {count, pttl_ms, allowed}), or fixed_window's error for
--! that key as a STRING element holding the error text (REDKIT_NOPERM, REDKIT_INPUT for a bad
--! window where a key needs it, REDKIT_DATA, WRONGTYPE ...; not an error element, which
--! clients such as redis-rs turn into an error for the whole reply): a key answered with an
--! error has nothing written, and the other keys' checks run as usual. Every write after a
--! key's first is one the ACL and memory checks already allowed, so no command fails after a
--! write and the call never stops half-way.
local MAX = 9007199254740991
local n = #KEYS
local limit = tonumber(ARGV[1])
local sent = #ARGV
if not (limit and limit >= 1 and limit <= MAX and limit % 1 == 0)
    or (sent ~= 2 and sent ~= n + 2) then
  return redis.error_reply('REDKIT_INPUT limit, window and cost must be integers 1..=2^53-1')
end
-- Costs: checked before the first write; '1' needs no conversion. None sent: each 1 (nil in
-- `costs` below stands for 1).
local costs = {}
if sent > 2 then
  for i = 1, n do
    local c = ARGV[i + 2]
    if c == '1' then
      costs[i] = 1
    elseif #c <= 16 and string.find(c, '^[1-9]%d*$') and tonumber(c) <= MAX then
      costs[i] = tonumber(c)
    else
      return redis.error_reply('REDKIT_INPUT cost must be a canonical decimal integer 1..=2^53-1')
    end
  end
end
local b = limit + 1

-- The reply {c, t, allowed}, packed as fixed_window packs it when it fits (c <= limit).
local function answer(c, t, allowed)
  local packed = t * b + c
  if c > limit or packed > MAX then
    return {c, t, allowed}
  end
  if allowed == 1 then
    return packed
  end
  return -packed - 1
end
-- The error text for a refused command's pcall reply (the cost is canonical: checked above).
local bad_data = 'REDKIT_DATA window counter is not a non-negative integer'
local function refused(r, cmd)
  if string.find(r.err, "can't run", 1, true) then
    return 'REDKIT_NOPERM ' .. cmd .. ' on the window counter'
  end
  if string.find(r.err, 'not an integer', 1, true) then
    return bad_data
  end
  return r.err
end
-- The window, read where a key uses it (as fixed_window reads it): nil when it is not valid.
local window, window_arg
local function window_ms()
  if window == nil then
    local w = tonumber(ARGV[2])
    if w and w >= 1 and w <= MAX and w % 1 == 0 then
      window, window_arg = w, string.format('%d', w)
    else
      window = false
    end
  end
  return window
end
local bad_window = 'REDKIT_INPUT limit, window and cost must be integers 1..=2^53-1'

-- fixed_window's path after the fast one, for KEYS[i]: ttl is PTTL's reply, count INCRBY's when the
-- fast path ran it.
local function general(key, cost_arg, cost, ttl, count)
  if type(ttl) == 'table' then
    return refused(ttl, 'PTTL')
  end
  if ttl == -2 then
    if not window_ms() then
      return bad_window
    end
    if cost > limit then
      return answer(0, window, 0)
    end
    local r = redis.pcall('SET', key, cost_arg, 'PX', window_arg)
    if r.err then
      return refused(r, 'SET')
    end
    return answer(cost, window, 1)
  end
  if not count then
    if not window_ms() then
      return bad_window
    end
    if not redis.acl_check_cmd('PEXPIRE', key, window_arg) then
      return 'REDKIT_NOPERM PEXPIRE on the window counter'
    end
    count = redis.pcall('INCRBY', key, cost_arg)
  end
  if type(count) == 'table' then
    if string.find(count.err, 'overflow', 1, true) then
      if ttl == -1 then
        redis.call('PEXPIRE', key, window_arg)
        ttl = window
      end
      return answer(MAX, ttl, 0)
    end
    return refused(count, 'INCRBY')
  end
  if count <= limit and count >= cost then
    if ttl == -1 then
      redis.call('PEXPIRE', key, window_arg)
      ttl = window
    end
    return answer(count, ttl, 1)
  end
  redis.call('INCRBY', key, '-' .. cost_arg)
  if count < cost then
    return bad_data
  end
  count = count - cost
  if count > MAX then
    count = MAX
  end
  if ttl == -1 then
    redis.call('PEXPIRE', key, window_arg)
    ttl = window
  end
  return answer(count, ttl, 0)
end

local out = {}
for i = 1, n do
  local key, cost_arg, cost = KEYS[i], ARGV[i + 2] or '1', costs[i] or 1
  local ttl = redis.pcall('PTTL', key)
  local reply
  if type(ttl) == 'number' and ttl >= 0 then
    -- The common path: a counter with a TTL.
    local count = redis.pcall('INCRBY', key, cost_arg)
    if type(count) == 'number' and count <= limit and count >= cost then
      local packed = ttl * b + count
      if packed <= MAX then
        reply = packed
      else
        reply = {count, ttl, 1}
      end
    else
      reply = general(key, cost_arg, cost, ttl, count)
    end
  else
    reply = general(key, cost_arg, cost, ttl, nil)
  end
  out[i] = reply
end
return out
