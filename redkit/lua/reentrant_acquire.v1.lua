--! keys: 2
--! Takes a reentrant lock, or one more hold of it for its owner. KEYS[1] = holds hash (one
--! field: owner token -> hold count; the lease is the key's TTL), KEYS[2] = fence key (last
--! fencing token issued); one hash slot.
--! ARGV[1] = owner token (16 to 128 bytes), ARGV[2] = lease in ms, ARGV[3] = fence key ttl in
--! ms (integers, 1 <= lease <= fence ttl < 10^15).
--! Returns {1, fence, holds} when the lock was free (holds 1, a new fencing token
--! max(stored + 1, server TIME in µs)) or held by this owner (holds + 1, the stored fencing
--! token; the lease is renewed either way); {0, pttl_ms} when another owner holds it.
--! Input, key types, stored data (counts and fence by Redis integer rules) and the ACL of every
--! command are checked before the first write: an error reply changed nothing.
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
  {'TYPE', holds}, {'TYPE', fence}, {'HGETALL', holds}, {'GET', fence}, {'TIME'}, {'PTTL', holds},
  {'HSET', holds, token, '1'}, {'PEXPIRE', holds, ttl_arg}, {'SET', fence, '1', 'PX', fence_ttl_arg},
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
local fence_kind = redis.call('TYPE', fence).ok
if fence_kind ~= 'string' and fence_kind ~= 'none' then
  return redis.error_reply('WRONGTYPE reentrant lock fence key is not a string')
end
local MAX = '9007199254740991'
local function int(s)
  return s and (s == '0' or (string.match(s, '^[1-9]%d*$')
    and (#s < #MAX or (#s == #MAX and s <= MAX))))
end
local all = redis.call('HGETALL', holds)
if #all > 2 or (all[2] and not (int(all[2]) and all[2] ~= '0')) then
  return redis.error_reply('REDKIT_DATA reentrant lock holds are not one owner with a count')
end
local stored = redis.call('GET', fence)
if stored and not int(stored) then
  return redis.error_reply('REDKIT_DATA fence key is not an integer in 0..2^53-1')
end
if all[1] and all[1] ~= token then
  return {0, redis.call('PTTL', holds)}
end
if all[1] and stored then
  -- One more hold by the owner (the first write is HSET, every command checked above).
  local n = tonumber(all[2]) + 1
  if n > tonumber(MAX) then
    return redis.error_reply('REDKIT_DATA hold count would pass 2^53-1')
  end
  redis.call('HSET', holds, token, string.format('%.0f', n))
  redis.call('PEXPIRE', holds, ttl_arg)
  redis.call('PEXPIRE', fence, fence_ttl_arg)
  return {1, tonumber(stored), n}
end
local t = redis.call('TIME')
local next = tonumber(t[1]) * 1000000 + tonumber(t[2])
if stored and tonumber(stored) + 1 > next then
  next = tonumber(stored) + 1
end
if next > tonumber(MAX) then
  return redis.error_reply('REDKIT_DATA fence would pass 2^53-1')
end
local n = 1
if all[1] then
  n = tonumber(all[2]) + 1
end
redis.call('HSET', holds, token, string.format('%.0f', n))
redis.call('PEXPIRE', holds, ttl_arg)
redis.call('SET', fence, string.format('%.0f', next), 'PX', fence_ttl_arg)
return {1, next, n}
