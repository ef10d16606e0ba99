--! keys: 1
--! Renews one permit's lease. KEYS[1] = the holders ZSET. ARGV[1] = owner token (16 to 128
--! bytes), ARGV[2] = lease in ms (1 to 2592000000).
--! Returns 1 when the token held an unexpired permit: its lease now ends `ttl` ms after server
--! TIME and the key's TTL is raised to it; 0 when the lease is lost (nothing changed).
--! Input, key type and the ACL of every command are checked first: an error changed nothing.
local key = KEYS[1]
local token, ttl_arg = ARGV[1], ARGV[2]
if not token or #token < 16 or #token > 128 then
  return redis.error_reply('REDKIT_INPUT token must be 16 to 128 bytes')
end
local ttl = ttl_arg and #ttl_arg <= 10 and string.match(ttl_arg, '^[1-9]%d*$') and tonumber(ttl_arg)
if not ttl or ttl > 2592000000 then
  return redis.error_reply('REDKIT_INPUT ttl must be an integer of ms in 1..2592000000')
end
local checks = {
  {'TYPE', key}, {'TIME'}, {'ZSCORE', key, token}, {'ZADD', key, 'XX', '0', token}, {'PTTL', key},
  {'PEXPIRE', key, ttl_arg},
}
for _, c in ipairs(checks) do
  if not redis.acl_check_cmd(unpack(c)) then
    return redis.error_reply('REDKIT_NOPERM ' .. c[1] .. ' is denied to this user')
  end
end
local kind = redis.call('TYPE', key).ok
if kind ~= 'zset' and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE semaphore key is not a sorted set')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = redis.call('ZSCORE', key, token)
if not score or tonumber(score) <= now then
  return 0
end
redis.call('ZADD', key, 'XX', string.format('%.0f', now + ttl), token)
if redis.call('PTTL', key) < ttl then
  redis.call('PEXPIRE', key, ttl)
end
return 1
