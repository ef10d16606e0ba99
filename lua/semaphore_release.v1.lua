--! keys: 1
--! Gives a permit back. KEYS[1] = the holders ZSET. ARGV[1] = owner token (16 to 128 bytes).
--! Returns 1 when the token held an unexpired permit (now removed), 0 when it held none or
--! only an expired one (an expired entry is removed too: it no longer counted).
--! Input, key type and the ACL of every command are checked first: an error changed nothing.
local key = KEYS[1]
local token = ARGV[1]
if not token or #token < 16 or #token > 128 then
  return redis.error_reply('REDKIT_INPUT token must be 16 to 128 bytes')
end
for _, c in ipairs({{'TYPE', key}, {'TIME'}, {'ZSCORE', key, token}, {'ZREM', key, token}}) do
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
if not score then
  return 0
end
redis.call('ZREM', key, token)
if tonumber(score) > now then
  return 1
end
return 0
