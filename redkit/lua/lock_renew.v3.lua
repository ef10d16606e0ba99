--! keys: 2
--! Renews a lease by compare-and-PEXPIRE. KEYS[1] = lock key, KEYS[2] = its fence key.
--! ARGV[1] = the owner token (16 to 128 bytes), ARGV[2] = new ttl in ms, ARGV[3] = fence key
--! ttl in ms (integers, 1 <= ttl <= fence ttl < 10^15).
--! Returns 1 when the key held this token, marked by a blocked acquirer (lock_mark) or not: its
--! TTL was reset (the value kept), and the fence key's TTL too (so the fencing token outlives
--! the lease); 0 when the lease is lost (nothing changed).
--! ACL of every command is checked before the first write: an error reply means nothing changed.
local lock, fence = KEYS[1], KEYS[2]
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
local checks = {{'GET', lock}, {'PEXPIRE', lock, ttl_arg}, {'PEXPIRE', fence, fence_ttl_arg}}
for _, c in ipairs(checks) do
  if not redis.acl_check_cmd(unpack(c)) then
    return redis.error_reply('REDKIT_NOPERM ' .. c[1] .. ' is denied to this user')
  end
end
local holder = redis.call('GET', lock)
if holder == token or holder == token .. '\255' then
  redis.call('PEXPIRE', lock, ttl_arg)
  redis.call('PEXPIRE', fence, fence_ttl_arg)
  return 1
end
return 0
