--! keys: 1
--! Fixed-window counter, v5: v4's contract and steps, with less Lua around the commands and
--! an integer reply: no helper closure on the common path (each `local function` is a new
--! closure per call), the argument checks inline, and the common path (a counter with a TTL
--! that the cost fits under: PTTL + INCRBY) answered before any refusal mapping is set up.
--! Reply: v4's {count, pttl_ms, allowed}, PACKED into one integer when it fits a Lua number
--! exactly (a table reply costs the server as much as a command): with b = limit + 1,
--! allowed: pttl_ms * b + count; not allowed: -(pttl_ms * b + count) - 1; when count > limit
--! (a limited request's stored count) or pttl_ms * b + count > 2^53 - 1, the table as in v4.
--! v4 (the v3 contract, two server steps on the common path, like the
--! seed `INCR; EXPIRE on the first hit` script). KEYS[1] = window counter. ARGV[1] = limit
--! (>= 1), ARGV[2] = window in ms (>= 1), ARGV[3] = cost (>= 1), each a canonical decimal
--! integer below 10^15. Returns {count, pttl_ms, allowed (1|0)}. A request that would exceed
--! the limit is not counted. A new counter is written with its expiry in one SET PX; a
--! counter found without a TTL gets one (it must never block a client forever).
--! Steps: PTTL (a read; -2 = no counter) decides the path, then ONE write:
--!  - no counter: SET key cost PX window;
--!  - a counter: INCRBY under redis.pcall. INCRBY parses the stored value itself (Redis's
--!    string2ll refuses "05", "-0", " 5", "5.0", "1e3", 20 digits, a hash or a list) before it
--!    writes anything. When the new count passes the limit, or the stored count was negative,
--!    the script puts back exactly what it added (INCRBY by -cost: the same command on the same
--!    key, so the ACL that allowed the first allows it, and the value is computed by the
--!    script): the keyspace is as before (the request is not counted);
--!  - a counter without a TTL: PEXPIRE is checked with redis.acl_check_cmd before INCRBY and
--!    runs after it.
--! A refused write is answered as REDKIT_NOPERM (ACL) or REDKIT_DATA (not an integer, or a
--! negative count); a WRONGTYPE error as Redis says it. Nothing is written then.
local key = KEYS[1]
local limit_arg, window_arg, cost_arg = ARGV[1], ARGV[2], ARGV[3]
-- Positive canonical integer arguments, exact as Lua numbers (< 10^15).
if not (limit_arg and #limit_arg <= 15 and string.find(limit_arg, '^[1-9]%d*$')) then
  return redis.error_reply('REDKIT_INPUT limit must be a positive integer')
end
if not (window_arg and #window_arg <= 15 and string.find(window_arg, '^[1-9]%d*$')) then
  return redis.error_reply('REDKIT_INPUT window must be a positive integer of ms')
end
if not (cost_arg and #cost_arg <= 15 and string.find(cost_arg, '^[1-9]%d*$')) then
  return redis.error_reply('REDKIT_INPUT cost must be a positive integer')
end
local limit, cost = tonumber(limit_arg), tonumber(cost_arg)

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

-- The typed error for a refused command's pcall reply: an ACL denial, a stored value INCRBY
-- will not parse, or WRONGTYPE as Redis says it.
local function refused(r, cmd)
  if string.find(r.err, "can't run", 1, true) then
    return redis.error_reply('REDKIT_NOPERM ' .. cmd .. ' on the window counter')
  end
  if string.find(r.err, 'not an integer', 1, true) then
    return redis.error_reply('REDKIT_DATA window counter is not a non-negative integer')
  end
  return r
end
local window = tonumber(window_arg)

if type(ttl) == 'table' then
  return refused(ttl, 'PTTL')
end
if ttl == -2 then
  -- A new window: nothing counted yet.
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
  -- A counter without a TTL: PEXPIRE is checked before INCRBY and runs after it.
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
