--! keys: 1
--! Fixed-window counter. KEYS[1] = window counter.
--! ARGV[1] = limit (>= 1), ARGV[2] = window in ms (>= 1), ARGV[3] = cost (>= 1).
--! Returns {count, pttl_ms, allowed (1|0)}. A request that would exceed the limit is not
--! counted. A counter found without a TTL gets one (it must never block a client forever).
--! A counter that is not a plain decimal integer is refused (REDKIT_DATA); nothing is written.
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
if not limit or limit < 1 or limit % 1 ~= 0 then
  return redis.error_reply('REDKIT_INPUT limit must be a positive integer')
end
if not window or window < 1 or window % 1 ~= 0 then
  return redis.error_reply('REDKIT_INPUT window must be a positive integer of ms')
end
if not cost or cost < 1 or cost % 1 ~= 0 then
  return redis.error_reply('REDKIT_INPUT cost must be a positive integer')
end

local raw = redis.call('GET', key)
local count = 0
if raw then
  -- Plain decimal digits only (no sign, space, exponent or hex), short enough to be exact.
  if not string.match(raw, '^%d+$') or #raw > 15 then
    return redis.error_reply('REDKIT_DATA window counter is not a non-negative integer')
  end
  count = tonumber(raw)
end

local allowed = 0
if count + cost <= limit then
  count = redis.call('INCRBY', key, cost)
  allowed = 1
end

local ttl = redis.call('PTTL', key)
if ttl == -1 then
  redis.call('PEXPIRE', key, window)
  ttl = window
elseif ttl == -2 then
  ttl = window
end
return {count, ttl, allowed}
