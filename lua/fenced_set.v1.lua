--! keys: 1
--! Fenced write. KEYS[1] = a hash with fields `value` and `fence` (the highest fencing token
--! that has written it).
--! ARGV[1] = the writer's fencing token (decimal integer >= 1, at most 19 digits),
--! ARGV[2] = the new value.
--! Returns {1, token} when written (token >= the stored fence), {0, stored_fence} when refused
--! because a newer token has already written (nothing is changed).
local presented = ARGV[1]
local value = ARGV[2]
if not presented or #presented > 19 or not string.match(presented, '^[1-9]%d*$') then
  return redis.error_reply('REDKIT_INPUT fencing token must be a positive integer')
end
if not value then
  return redis.error_reply('REDKIT_INPUT value is missing')
end
local last = redis.call('HGET', KEYS[1], 'fence')
if last then
  if #last > 19 or not string.match(last, '^[1-9]%d*$') then
    return redis.error_reply('REDKIT_DATA stored fence is not a positive integer')
  end
  -- Both are canonical decimals: compare by length, then lexically (no float rounding).
  if #last > #presented or (#last == #presented and last > presented) then
    return {0, last}
  end
end
redis.call('HSET', KEYS[1], 'value', value, 'fence', presented)
return {1, presented}
