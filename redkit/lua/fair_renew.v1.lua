--! keys: 2
--! Renews the holder's lease of a fair lock. KEYS[1] = queue ZSET, KEYS[2] = leases ZSET (one
--! hash slot). ARGV[1] = owner token (16 to 128 bytes), ARGV[2] = lease in ms (1 to 2592000000).
--! Returns 1 when the token is the head of the queue with an unexpired lease: the lease now
--! ends `ttl` ms after server TIME and both keys live at least that long; 0 when the lease is
--! lost (nothing changed).
--! Input, key types and the ACL of every command are checked first: an error changed nothing.
local queue, leases = KEYS[1], KEYS[2]
local token, ttl_arg = ARGV[1], ARGV[2]
if not token or #token < 16 or #token > 128 then
  return redis.error_reply('REDKIT_INPUT token must be 16 to 128 bytes')
end
local ttl = ttl_arg and #ttl_arg <= 10 and string.match(ttl_arg, '^[1-9]%d*$') and tonumber(ttl_arg)
if not ttl or ttl > 2592000000 then
  return redis.error_reply('REDKIT_INPUT ttl must be an integer of ms in 1..2592000000')
end
local checks = {
  {'TYPE', queue}, {'TYPE', leases}, {'TIME'}, {'ZRANGE', queue, '0', '0'},
  {'ZSCORE', leases, token}, {'ZADD', leases, 'XX', '0', token}, {'PTTL', queue},
  {'PEXPIRE', queue, ttl_arg}, {'PEXPIRE', leases, ttl_arg},
}
for _, c in ipairs(checks) do
  if not redis.acl_check_cmd(unpack(c)) then
    return redis.error_reply('REDKIT_NOPERM ' .. c[1] .. ' is denied to this user')
  end
end
for _, k in ipairs({queue, leases}) do
  local kind = redis.call('TYPE', k).ok
  if kind ~= 'zset' and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE fair lock key is not a sorted set')
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local head = redis.call('ZRANGE', queue, '0', '0')[1]
local score = redis.call('ZSCORE', leases, token)
if head ~= token or not score or tonumber(score) <= now then
  return 0
end
redis.call('ZADD', leases, 'XX', string.format('%.0f', now + ttl), token)
if redis.call('PTTL', queue) < ttl then
  redis.call('PEXPIRE', queue, ttl)
  redis.call('PEXPIRE', leases, ttl)
end
return 1
