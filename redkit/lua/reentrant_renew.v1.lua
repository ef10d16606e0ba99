--! keys: 2
--! Renews a reentrant lock's lease (all holds share it). KEYS[1] = holds hash, KEYS[2] = its
--! fence key. ARGV[1] = owner token (16 to 128 bytes), ARGV[2] = lease in ms, ARGV[3] = fence
--! key ttl in ms (integers, 1 <= lease <= fence ttl < 10^15).
--! Returns 1 when the token holds the lock (both TTLs reset), 0 when not (nothing changed).
--! Input, key type and the ACL of every command are checked first: an error changed nothing.
local holds, fence = KEYS[1], KEYS[2]
local token, ttl_arg, fence_ttl_arg = ARGV[1], ARGV[2], ARGV[3]
local function ms(s)
  return s and #s <= 15 and string.match(s, '^[1-9]%d*$') and tonumber(s)
end
if not token or #token < 16 or #token > 128 then
  return redis.error_reply('REDKIT_INPUT token must be 16 to 128 bytes')
end
local ttl, fence_ttl = ms(ttl_arg), ms(fence_ttl_arg)
if not ttl then
  return redis.error_reply('REDKIT_INPUT ttl must be a positive integer of ms')
end
if not fence_ttl or fence_ttl < ttl then
  return redis.error_reply('REDKIT_INPUT fence ttl must be an integer of ms >= ttl')
end
local checks = {
  {'TYPE', holds}, {'HEXISTS', holds, token}, {'PEXPIRE', holds, ttl_arg},
  {'PEXPIRE', fence, fence_ttl_arg},
}
for _, c in ipairs(checks) do
  if not redis.acl_check_cmd(unpack(c)) then
    return redis.error_reply('REDKIT_NOPERM ' .. c[1] .. ' is denied to this user')
  end
end
local kind = redis.call('TYPE', holds).ok
if kind ~= 'hash' and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE reentrant lock key is not a hash')
end
if redis.call('HEXISTS', holds, token) == 1 then
  redis.call('PEXPIRE', holds, ttl_arg)
  redis.call('PEXPIRE', fence, fence_ttl_arg)
  return 1
end
return 0
