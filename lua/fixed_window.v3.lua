--! keys: 1
--! Fixed-window counter, v3 (same contract as v2, fewer server steps). KEYS[1] = window
--! counter. ARGV[1] = limit (>= 1), ARGV[2] = window in ms (>= 1), ARGV[3] = cost (>= 1), each
--! a canonical decimal integer below 10^15. Returns {count, pttl_ms, allowed (1|0)}. A request
--! that would exceed the limit is not counted. A new counter is written with its expiry in one
--! SET PX; a counter found without a TTL gets one (it must never block a client forever).
--! Nothing is half-applied, at the cost of no ACL precheck on the common paths:
--!  - reads (GET, PTTL) run before any write, so their denial writes nothing;
--!  - each path writes with ONE command (SET PX, or INCRBY), except a counter found without
--!    a TTL, where PEXPIRE is checked with redis.acl_check_cmd before INCRBY runs;
--!  - the stored counter is parsed by INCRBY itself (Redis's string2ll refuses "05", "-0",
--!    " 5", "5.0", "1e3" before writing anything) when the request is allowed, and by the
--!    same rules in Lua when it is not (nothing is written then).
--! A refused write is answered as REDKIT_NOPERM (ACL) or REDKIT_DATA (not an integer).
local key = KEYS[1]

-- A positive canonical integer argument, exact as a Lua number (< 10^15).
local function positive(s)
  return s and #s <= 15 and string.match(s, '^[1-9]%d*$') and tonumber(s)
end
local limit, window, cost = positive(ARGV[1]), positive(ARGV[2]), positive(ARGV[3])
if not limit then
  return redis.error_reply('REDKIT_INPUT limit must be a positive integer')
end
if not window then
  return redis.error_reply('REDKIT_INPUT window must be a positive integer of ms')
end
if not cost then
  return redis.error_reply('REDKIT_INPUT cost must be a positive integer')
end

-- The typed error for a refused command's pcall reply (nil when it was not refused):
-- an ACL denial, a stored value INCRBY will not parse, or WRONGTYPE as Redis says it.
local function refused(r, cmd)
  if type(r) == 'table' and r.err then
    if string.find(r.err, "can't run", 1, true) then
      return redis.error_reply('REDKIT_NOPERM ' .. cmd .. ' on the window counter')
    end
    if string.find(r.err, 'not an integer', 1, true) then
      return redis.error_reply('REDKIT_DATA window counter is not a non-negative integer')
    end
    return r
  end
  return nil
end
local function denied(cmd)
  return redis.error_reply('REDKIT_NOPERM ' .. cmd .. ' on the window counter')
end

local raw = redis.pcall('GET', key)
local err = refused(raw, 'GET')
if err then
  return err
end
if not raw then
  -- A new window: nothing counted yet.
  if cost > limit then
    return {0, window, 0}
  end
  err = refused(redis.pcall('SET', key, ARGV[3], 'PX', ARGV[2]), 'SET')
  if err then
    return err
  end
  return {cost, window, 1}
end

local ttl = redis.pcall('PTTL', key)
err = refused(ttl, 'PTTL')
if err then
  return err
end
-- tonumber is lenient ("5.0", " 5", "0x10"): only a hint here. An allowed request is
-- parsed strictly by INCRBY; any other goes through the strict check below.
local hint = tonumber(raw)
if hint and hint >= 0 and hint + cost <= limit then
  if ttl < 0 and not redis.acl_check_cmd('PEXPIRE', key, ARGV[2]) then
    return denied('PEXPIRE')
  end
  local count = redis.pcall('INCRBY', key, ARGV[3])
  err = refused(count, 'INCRBY')
  if err then
    return err
  end
  if ttl < 0 then
    redis.call('PEXPIRE', key, ARGV[2])
    ttl = window
  end
  return {count, ttl, 1}
end

-- Limited (or bad data): Redis's string2ll, non-negative, within int64.
local digits = #raw
if not (raw == '0' or (string.match(raw, '^[1-9]%d*$') and (digits < 19
    or (digits == 19 and raw <= '9223372036854775807')))) then
  return redis.error_reply('REDKIT_DATA window counter is not a non-negative integer')
end
-- Above 2^53 a Lua number is not exact; any such counter is far above every limit.
local count = 9007199254740991
if digits <= 15 then
  count = tonumber(raw)
end
-- A canonical counter <= 15 digits took the path above, so this one is over the limit.
if ttl < 0 then
  err = refused(redis.pcall('PEXPIRE', key, ARGV[2]), 'PEXPIRE')
  if err then
    return err
  end
  ttl = window
end
return {count, ttl, 0}
