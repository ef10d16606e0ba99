--! keys: 1
--! Compare-and-set of a versioned value. KEYS[1] = a HASH {value, version[, fence]}.
--! ARGV[1] = expected version (0 = the key does not exist; else 1..2^53-2), ARGV[2] = new
--! value, ARGV[3] = fencing token ('' for none; else an integer in 1..2^53-1).
--! Returns {1, new_version} when the stored version equals the expected one (and the fence,
--! if given, is not older than the stored one): value set, version bumped by one, fence stored.
--! Returns {0, version[, value]} on a version conflict (version 0: no key), nothing changed.
--! Returns {2, stored_fence} when a newer fencing token wrote first, nothing changed.
--! Input, key type, stored fields (Redis integer rules) and the ACL of every command are
--! checked before the first write: an error reply means nothing changed.
local key = KEYS[1]
local expected_arg, value, fence_arg = ARGV[1], ARGV[2], ARGV[3]
local MAX = '9007199254740991'
local function positive(s)
  return s and string.match(s, '^[1-9]%d*$') and (#s < #MAX or (#s == #MAX and s <= MAX))
end
if not (expected_arg == '0' or positive(expected_arg)) or expected_arg == MAX then
  return redis.error_reply('REDKIT_INPUT expected version must be an integer in 0..2^53-2')
end
if not value then
  return redis.error_reply('REDKIT_INPUT value is missing')
end
if not fence_arg or not (fence_arg == '' or positive(fence_arg)) then
  return redis.error_reply('REDKIT_INPUT fence must be empty or an integer in 1..2^53-1')
end
local checks = {
  {'TYPE', key}, {'HMGET', key, 'value', 'version', 'fence'},
  {'HSET', key, 'value', value, 'version', '1', 'fence', '1'},
}
for _, c in ipairs(checks) do
  if not redis.acl_check_cmd(unpack(c)) then
    return redis.error_reply('REDKIT_NOPERM ' .. c[1] .. ' is denied to this user')
  end
end
local kind = redis.call('TYPE', key).ok
if kind ~= 'hash' and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE versioned key is not a hash')
end
local version, stored, fence = 0, nil, nil
if kind == 'hash' then
  local f = redis.call('HMGET', key, 'value', 'version', 'fence')
  if not f[1] then
    return redis.error_reply('REDKIT_DATA versioned value has no value field')
  end
  if not positive(f[2]) then
    return redis.error_reply('REDKIT_DATA version is not an integer in 1..2^53-1')
  end
  if f[3] and not positive(f[3]) then
    return redis.error_reply('REDKIT_DATA fence is not an integer in 1..2^53-1')
  end
  stored, version, fence = f[1], tonumber(f[2]), f[3]
end
if fence_arg ~= '' and fence and tonumber(fence_arg) < tonumber(fence) then
  return {2, tonumber(fence)}
end
if version ~= tonumber(expected_arg) then
  if stored then
    return {0, version, stored}
  end
  return {0, version}
end
if version >= tonumber(MAX) then
  return redis.error_reply('REDKIT_DATA version would pass 2^53-1')
end
local next = string.format('%.0f', version + 1)
if fence_arg ~= '' then
  redis.call('HSET', key, 'value', value, 'version', next, 'fence', fence_arg)
else
  redis.call('HSET', key, 'value', value, 'version', next)
end
return {1, version + 1}
