--! keys: 1
--! Fixed-window counter, v2. KEYS[1] = window counter.
--! ARGV[1] = limit (>= 1), ARGV[2] = window in ms (>= 1), ARGV[3] = cost (>= 1), each a
--! canonical decimal integer. Returns {count, pttl_ms, allowed (1|0)}. A request that would
--! exceed the limit is not counted. A new counter is written with its expiry in one SET PX;
--! a counter found without a TTL gets one (it must never block a client forever).
--! Nothing is half-applied: the stored counter is parsed with Redis's own integer rules and
--! every command it runs is checked with redis.acl_check_cmd (with the real key) before the
--! first write: a denial is a REDKIT_NOPERM error and nothing is written.
local key = KEYS[1]

-- Redis's string2ll: "0" or -?[1-9][0-9]* within int64 (no sign, space, dot or exponent).
local function int64(s)
  if s == '0' then return true end
  local digits = s
  local max = '9223372036854775807'
  if string.sub(s, 1, 1) == '-' then
    digits = string.sub(s, 2)
    max = '9223372036854775808'
  end
  if not string.match(digits, '^[1-9][0-9]*$') or #digits > 19 then return false end
  return #digits < 19 or digits <= max
end

-- A positive integer argument, exact as a Lua number (< 2^53).
local function positive(s)
  if not int64(s) or string.sub(s, 1, 1) == '-' or s == '0' or #s > 15 then return nil end
  return tonumber(s)
end

local limit = positive(ARGV[1])
local window = positive(ARGV[2])
local cost = positive(ARGV[3])
if not limit then
  return redis.error_reply('REDKIT_INPUT limit must be a positive integer')
end
if not window then
  return redis.error_reply('REDKIT_INPUT window must be a positive integer of ms')
end
if not cost then
  return redis.error_reply('REDKIT_INPUT cost must be a positive integer')
end

local function denied(cmd)
  return redis.error_reply('REDKIT_NOPERM ' .. cmd .. ' on the window counter')
end

if not redis.acl_check_cmd('GET', key) then
  return denied('GET')
end
local raw = redis.call('GET', key)
if not raw then
  -- A new window: nothing counted yet.
  if cost > limit then
    return {0, window, 0}
  end
  if not redis.acl_check_cmd('SET', key, ARGV[3], 'PX', ARGV[2]) then
    return denied('SET')
  end
  redis.call('SET', key, ARGV[3], 'PX', ARGV[2])
  return {cost, window, 1}
end

if not int64(raw) or string.sub(raw, 1, 1) == '-' then
  return redis.error_reply('REDKIT_DATA window counter is not a non-negative integer')
end
-- Above 2^53 a Lua number is not exact; any such counter is far above every limit.
local count = 9007199254740991
if #raw <= 15 then
  count = tonumber(raw)
end

local allowed = count + cost <= limit
if not redis.acl_check_cmd('PTTL', key) then
  return denied('PTTL')
end
local ttl = redis.call('PTTL', key)
if allowed and not redis.acl_check_cmd('INCRBY', key, ARGV[3]) then
  return denied('INCRBY')
end
if ttl < 0 and not redis.acl_check_cmd('PEXPIRE', key, ARGV[2]) then
  return denied('PEXPIRE')
end
if allowed then
  count = redis.call('INCRBY', key, ARGV[3])
end
if ttl < 0 then
  redis.call('PEXPIRE', key, ARGV[2])
  ttl = window
end
return {count, ttl, allowed and 1 or 0}
