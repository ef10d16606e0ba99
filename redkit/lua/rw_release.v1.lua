--! keys: 3
--! Releases a read or write hold of a read-write lock, or withdraws a writer's intent.
--! KEYS[1] = readers ZSET, KEYS[2] = writer key, KEYS[3] = writer intent (one hash slot).
--! ARGV[1] = owner token (16 to 128 bytes).
--! Returns 1 when the token held the lock (the writer key held it, or it was a reader with an
--! unexpired lease): that hold is removed; 0 otherwise (an expired reader entry is removed
--! too). In both cases an intent held by this token is deleted (a writer giving up).
--! Input, key types and the ACL of every command are checked first: an error changed nothing.
local readers, writer, intent = KEYS[1], KEYS[2], KEYS[3]
local token = ARGV[1]
if not token or #token < 16 or #token > 128 then
  return redis.error_reply('REDKIT_INPUT token must be 16 to 128 bytes')
end
local checks = {
  {'TYPE', readers}, {'TYPE', writer}, {'TYPE', intent}, {'TIME'}, {'GET', writer},
  {'GET', intent}, {'ZSCORE', readers, token}, {'ZREM', readers, token}, {'DEL', writer},
  {'DEL', intent},
}
for _, c in ipairs(checks) do
  if not redis.acl_check_cmd(unpack(c)) then
    return redis.error_reply('REDKIT_NOPERM ' .. c[1] .. ' is denied to this user')
  end
end
local kinds = {{readers, 'zset'}, {writer, 'string'}, {intent, 'string'}}
for _, k in ipairs(kinds) do
  local kind = redis.call('TYPE', k[1]).ok
  if kind ~= k[2] and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE read-write lock key is not a ' .. k[2])
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local held = 0
if redis.call('GET', intent) == token then
  redis.call('DEL', intent)
end
if redis.call('GET', writer) == token then
  redis.call('DEL', writer)
  held = 1
end
local score = redis.call('ZSCORE', readers, token)
if score then
  redis.call('ZREM', readers, token)
  if tonumber(score) > now then
    held = 1
  end
end
return held
