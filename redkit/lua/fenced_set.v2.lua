--! keys: 1
--! Fenced write. KEYS[1] = a hash with fields `value` and `fence` (the highest fencing token
--! that has written it).
--! ARGV[1] = the writer's fencing token (decimal integer in 1..2^63-1), ARGV[2] = the new value.
--! Returns {1, token} when written (token >= the stored fence), {0, stored_fence} when refused
--! because a newer token has already written (nothing is changed).
--! Everything is checked before the write (input, the stored fence by Redis integer rules,
--! ACL of HGET and HSET on the real key): an error reply means nothing changed.
local MAX = '9223372036854775807'
local function positive(s)
  return s and string.match(s, '^[1-9]%d*$') and (#s < #MAX or (#s == #MAX and s <= MAX))
end
local presented = ARGV[1]
local value = ARGV[2]
if not positive(presented) then
  return redis.error_reply('REDKIT_INPUT fencing token must be an integer in 1..2^63-1')
end
if not value then
  return redis.error_reply('REDKIT_INPUT value is missing')
end
local checks = {{'HGET', KEYS[1], 'fence'}, {'HSET', KEYS[1], 'value', value, 'fence', presented}}
for _, c in ipairs(checks) do
  if not redis.acl_check_cmd(unpack(c)) then
    return redis.error_reply('REDKIT_NOPERM ' .. c[1] .. ' is denied to this user')
  end
end
local last = redis.call('HGET', KEYS[1], 'fence')
if last then
  if not positive(last) then
    return redis.error_reply('REDKIT_DATA stored fence is not an integer in 1..2^63-1')
  end
  -- Both are canonical decimals: compare by length, then lexically (no float rounding).
  if #last > #presented or (#last == #presented and last > presented) then
    return {0, last}
  end
end
redis.call('HSET', KEYS[1], 'value', value, 'fence', presented)
return {1, presented}
