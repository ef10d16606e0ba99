--! keys: 1
--! Fixed-window counter.
--! KEYS[1] = window counter. ARGV[1] = limit, ARGV[2] = window in ms, ARGV[3] (optional,
--! 1 when left out) = cost: each an integer 1..=2^53-1 (the limit and the window in any form
--! Lua's tonumber reads as that number; the cost canonical decimal). A request that would
--! exceed the limit is not counted.
--! Reply: with b = limit + 1, allowed: pttl_ms * b + count; not allowed:
--! -(pttl_ms * b + count) - 1; when count > limit (a limited request's stored count) or
--! pttl_ms * b + count > 2^53 - 1, the table {count, pttl_ms, allowed (1|0)}.
--! The window is checked only where it is used: when a window starts (SET PX) or a counter
--! lacks a TTL (PEXPIRE). A call that counts in a running window does not read the window,
--! so it does not check it either; a call that would use a bad window refuses it before it
--! writes anything.
--! Steps: the limit and the cost are checked, then PTTL (a read; -2 = no counter) decides the
--! path, then ONE write:
--!  - no counter: the window is checked, then SET key cost PX window;
--!  - a counter: INCRBY under redis.pcall. INCRBY parses the stored value and the cost itself
--!    (Redis's string2ll refuses "05", "-0", " 5", "5.0", "1e3", 20 digits, a hash or a list)
--!    before it writes anything. When the new count passes the limit, or the stored count was
--!    negative, the script puts back exactly what it added (INCRBY by -cost: the same command
--!    on the same key, so the ACL that allowed the first allows it): the keyspace is as the
--!    call found it (the request is not counted);
--!  - a counter without a TTL: the window is checked, and PEXPIRE with
--!    redis.acl_check_cmd, before INCRBY; PEXPIRE runs after it.
--! A refused write is answered as REDKIT_NOPERM (ACL), REDKIT_INPUT (a cost INCRBY will not
--! parse) or REDKIT_DATA (a stored value it will not parse, or a negative count); a WRONGTYPE
--! error as Redis says it. Nothing is written then.
local key = KEYS[1]
local limit_arg, window_arg, cost_arg = ARGV[1], ARGV[2], ARGV[3]
-- The limit and the cost, checked as numbers before anything is written: integers
-- 1..=2^53-1 (the cost's form: INCRBY, or the check before a new counter's SET). A cost of
-- "1" (or none: 1) needs no conversion.
local limit, cost = tonumber(limit_arg), 1
if not cost_arg then
  cost_arg = '1'
elseif cost_arg ~= '1' then
  cost = tonumber(cost_arg)
end
if not (limit and cost and limit >= 1 and cost >= 1 and limit <= 9007199254740991
    and cost <= 9007199254740991 and limit % 1 == 0) then
  return redis.error_reply('REDKIT_INPUT limit, window and cost must be integers 1..=2^53-1')
end

local ttl = redis.pcall('PTTL', key)
local count
if type(ttl) == 'number' and ttl >= 0 then
  -- The common path: a counter with a TTL.
  count = redis.pcall('INCRBY', key, cost_arg)
  if type(count) == 'number' and count <= limit and count >= cost then
    local packed = ttl * (limit + 1) + count
    if packed <= 9007199254740991 then
      return packed
    end
    return {count, ttl, 1}
  end
end

-- The reply {c, t, allowed}, packed as described in the header when it fits (c <= limit).
local function answer(c, t, allowed)
  local packed = t * (limit + 1) + c
  if c > limit or packed > 9007199254740991 then
    return {c, t, allowed}
  end
  if allowed == 1 then
    return packed
  end
  return -packed - 1
end

-- Whether the cost is a canonical decimal integer (what INCRBY and SET store as a count).
local function canonical_cost()
  return #cost_arg <= 16 and string.find(cost_arg, '^[1-9]%d*$')
end
local bad_cost = 'REDKIT_INPUT cost must be a canonical decimal integer'

-- The typed error for a refused command's pcall reply: an ACL denial, a cost or stored value
-- INCRBY will not parse, or WRONGTYPE as Redis says it.
local function refused(r, cmd)
  if string.find(r.err, "can't run", 1, true) then
    return redis.error_reply('REDKIT_NOPERM ' .. cmd .. ' on the window counter')
  end
  if string.find(r.err, 'not an integer', 1, true) then
    if not canonical_cost() then
      return redis.error_reply(bad_cost)
    end
    return redis.error_reply('REDKIT_DATA window counter is not a non-negative integer')
  end
  return r
end
-- The window, for the paths that use it: checked as a number (1..=2^53-1, integral), then
-- passed on to Redis as the number it parses to, in decimal. Nil when it is not valid.
local function window_ms()
  local w = tonumber(window_arg)
  if not (w and w >= 1 and w <= 9007199254740991 and w % 1 == 0) then
    return nil
  end
  window_arg = string.format('%d', w)
  return w
end
local bad_window = 'REDKIT_INPUT limit, window and cost must be integers 1..=2^53-1'
local window

if type(ttl) == 'table' then
  return refused(ttl, 'PTTL')
end
if ttl == -2 then
  -- A new window: nothing counted yet.
  window = window_ms()
  if not window then
    return redis.error_reply(bad_window)
  end
  if not canonical_cost() then
    return redis.error_reply(bad_cost)
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
  -- A counter without a TTL: the window and PEXPIRE are checked before INCRBY; PEXPIRE runs
  -- after it.
  window = window_ms()
  if not window then
    return redis.error_reply(bad_window)
  end
  if not redis.acl_check_cmd('PEXPIRE', key, window_arg) then
    return redis.error_reply('REDKIT_NOPERM PEXPIRE on the window counter')
  end
  count = redis.pcall('INCRBY', key, cost_arg)
end
if type(count) == 'table' then
  if string.find(count.err, 'overflow', 1, true) then
    -- A canonical counter near 2^63: far above every limit; nothing was written.
    if ttl == -1 then
      redis.call('PEXPIRE', key, window_arg)
      ttl = window
    end
    return answer(9007199254740991, ttl, 0)
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
-- Not counted: put back what this call added.
redis.call('INCRBY', key, '-' .. cost_arg)
if count < cost then
  return redis.error_reply('REDKIT_DATA window counter is not a non-negative integer')
end
count = count - cost
if count > 9007199254740991 then
  count = 9007199254740991
end
if ttl == -1 then
  -- Limited, and the counter has no TTL: give it one (PEXPIRE was checked above).
  redis.call('PEXPIRE', key, window_arg)
  ttl = window
end
return answer(count, ttl, 0)
