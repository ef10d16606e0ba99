--! keys: 1
--! flags: no-writes
--! Reads a versioned value. KEYS[1] = a HASH {value, version[, fence]}.
--! Returns {0} when the key does not exist, else {version, value}.
--! The stored version must be an integer in 1..2^53-1 by Redis's integer rules, the value
--! present, and the fence (if any) an integer in 1..2^53-1: else REDKIT_DATA.
--! Declared read-only: sent as EVALSHA_RO / FCALL_RO (replicas may serve it).
local key = KEYS[1]
for _, c in ipairs({{'TYPE', key}, {'HMGET', key, 'value', 'version', 'fence'}}) do
  if not redis.acl_check_cmd(unpack(c)) then
    return redis.error_reply('REDKIT_NOPERM ' .. c[1] .. ' is denied to this user')
  end
end
local kind = redis.call('TYPE', key).ok
if kind == 'none' then
  return {0}
end
if kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE versioned key is not a hash')
end
local MAX = '9007199254740991'
local function positive(s)
  return s and string.match(s, '^[1-9]%d*$') and (#s < #MAX or (#s == #MAX and s <= MAX))
end
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
return {tonumber(f[2]), f[1]}
