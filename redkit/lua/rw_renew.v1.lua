--! keys: 2
--! Renews a read or write hold of a read-write lock. KEYS[1] = readers ZSET, KEYS[2] = writer
--! key (one hash slot). ARGV[1] = owner token (16 to 128 bytes), ARGV[2] = lease in ms (1 to
--! 2592000000).
--! Returns 1 when the token holds the lock: the writer key's TTL, or the reader's lease end
--! (and the readers key's TTL, raised only), now run `ttl` ms from server TIME; 0 when the
--! hold is lost (nothing changed).
--! Input, key types and the ACL of every command are checked first: an error changed nothing.
local readers, writer = KEYS[1], KEYS[2]
local token, ttl_arg = ARGV[1], ARGV[2]
if not token or #token < 16 or #token > 128 then
  return redis.error_reply('REDKIT_INPUT token must be 16 to 128 bytes')
end
local ttl = ttl_arg and #ttl_arg <= 10 and string.match(ttl_arg, '^[1-9]%d*$') and tonumber(ttl_arg)
if not ttl or ttl > 2592000000 then
  return redis.error_reply('REDKIT_INPUT ttl must be an integer of ms in 1..2592000000')
end
local checks = {
  {'TYPE', readers}, {'TYPE', writer}, {'TIME'}, {'GET', writer}, {'PEXPIRE', writer, ttl_arg},
  {'ZSCORE', readers, token}, {'ZADD', readers, 'XX', '0', token}, {'PTTL', readers},
  {'PEXPIRE', readers, ttl_arg},
}
for _, c in ipairs(checks) do
  if not redis.acl_check_cmd(unpack(c)) then
    return redis.error_reply('REDKIT_NOPERM ' .. c[1] .. ' is denied to this user')
  end
end
local kinds = {{readers, 'zset'}, {writer, 'string'}}
for _, k in ipairs(kinds) do
  local kind = redis.call('TYPE', k[1]).ok
  if kind ~= k[2] and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE read-write lock key is not a ' .. k[2])
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('GET', writer) == token then
  redis.call('PEXPIRE', writer, ttl_arg)
  return 1
end
local score = redis.call('ZSCORE', readers, token)
if not score or tonumber(score) <= now then
  return 0
end
redis.call('ZADD', readers, 'XX', string.format('%.0f', now + ttl), token)
if redis.call('PTTL', readers) < ttl then
  redis.call('PEXPIRE', readers, ttl_arg)
end
return 1
