--! keys: 2
--! Acquires a lock. KEYS[1] = lock key, KEYS[2] = fencing counter of the same resource
--! (same hash slot; never expires, so fencing tokens never go backwards).
--! ARGV[1] = owner token (16 to 128 bytes), ARGV[2] = ttl in ms (integer >= 1).
--! Returns {1, fencing_token} when acquired: SET NX PX, then INCR of the counter, atomically.
--! Returns {0, pttl_ms} when another owner holds it (pttl -1: the holder's key has no TTL).
local token = ARGV[1]
local ttl = tonumber(ARGV[2])
if not token or #token < 16 or #token > 128 then
  return redis.error_reply('REDKIT_INPUT token must be 16 to 128 bytes')
end
if not ttl or ttl < 1 or ttl % 1 ~= 0 then
  return redis.error_reply('REDKIT_INPUT ttl must be a positive integer of ms')
end
local fence = redis.call('GET', KEYS[2])
if fence and not string.match(fence, '^%d+$') then
  return redis.error_reply('REDKIT_DATA fencing counter is not a non-negative integer')
end
if not redis.call('SET', KEYS[1], token, 'NX', 'PX', ttl) then
  return {0, redis.call('PTTL', KEYS[1])}
end
return {1, redis.call('INCR', KEYS[2])}
