--! keys: 1
--! Gives back one hold of a reentrant lock. KEYS[1] = holds hash (owner token -> count).
--! ARGV[1] = owner token (16 to 128 bytes).
--! Returns the holds left (0: the lock is free now, the key deleted) when the token held it,
--! -1 when it did not (expired, or another owner's): nothing changed then.
--! Input, key type, the stored count and the ACL of every command are checked first: an
--! error changed nothing.
local holds = KEYS[1]
local token = ARGV[1]
if not token or #token < 16 or #token > 128 then
  return redis.error_reply('REDKIT_INPUT token must be 16 to 128 bytes')
end
local checks = {{'TYPE', holds}, {'HGET', holds, token}, {'HSET', holds, token, '1'}, {'DEL', holds}}
for _, c in ipairs(checks) do
  if not redis.acl_check_cmd(unpack(c)) then
    return redis.error_reply('REDKIT_NOPERM ' .. c[1] .. ' is denied to this user')
  end
end
local kind = redis.call('TYPE', holds).ok
if kind ~= 'hash' and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE reentrant lock key is not a hash')
end
local count = redis.call('HGET', holds, token)
if not count then
  return -1
end
if not (string.match(count, '^[1-9]%d*$') and #count <= 16) then
  return redis.error_reply('REDKIT_DATA reentrant lock hold count is not a positive integer')
end
local n = tonumber(count) - 1
if n <= 0 then
  redis.call('DEL', holds)
  return 0
end
redis.call('HSET', holds, token, string.format('%.0f', n))
return n
