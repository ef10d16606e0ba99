--! keys: 1
--! Renews a lease by compare-and-PEXPIRE. KEYS[1] = lock key.
--! ARGV[1] = the owner token (16 to 128 bytes), ARGV[2] = new ttl in ms (integer >= 1).
--! Returns 1 when the key held this token and its TTL was reset, 0 when the lease is lost.
local token = ARGV[1]
local ttl = tonumber(ARGV[2])
if not token or #token < 16 or #token > 128 then
  return redis.error_reply('REDKIT_INPUT token must be 16 to 128 bytes')
end
if not ttl or ttl < 1 or ttl % 1 ~= 0 then
  return redis.error_reply('REDKIT_INPUT ttl must be a positive integer of ms')
end
if redis.call('GET', KEYS[1]) == token then
  redis.call('PEXPIRE', KEYS[1], ttl)
  return 1
end
return 0
