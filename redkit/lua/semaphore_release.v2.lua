--! keys: 2
--! Gives a permit back and wakes one blocked waiter. KEYS[1] = the holders ZSET, KEYS[2] =
--! the wake-up list of the same resource (same hash slot). ARGV[1] = owner token (16 to 128
--! bytes), ARGV[2] = permits (1 to 1000000): the list is trimmed to that many entries and
--! expires after 60 s, so notifications nobody waited for stay bounded.
--! Returns 1 when the token held an unexpired permit (now removed, one entry pushed to the
--! list), 0 when it held none or only an expired one (an expired entry is removed too).
--! Input, key types and the ACL of every command are checked first: an error changed nothing.
local key, wake = KEYS[1], KEYS[2]
local token, permits_arg = ARGV[1], ARGV[2]
if not token or #token < 16 or #token > 128 then
  return redis.error_reply('REDKIT_INPUT token must be 16 to 128 bytes')
end
local permits = permits_arg and #permits_arg <= 7 and string.match(permits_arg, '^[1-9]%d*$')
  and tonumber(permits_arg)
if not permits or permits > 1000000 then
  return redis.error_reply('REDKIT_INPUT permits must be an integer in 1..1000000')
end
local checks = {
  {'TYPE', key}, {'TYPE', wake}, {'TIME'}, {'ZSCORE', key, token}, {'ZREM', key, token},
  {'LPUSH', wake, '1'}, {'LTRIM', wake, '0', '0'}, {'PEXPIRE', wake, '60000'},
}
for _, c in ipairs(checks) do
  if not redis.acl_check_cmd(unpack(c)) then
    return redis.error_reply('REDKIT_NOPERM ' .. c[1] .. ' is denied to this user')
  end
end
local kind = redis.call('TYPE', key).ok
if kind ~= 'zset' and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE semaphore key is not a sorted set')
end
local wake_kind = redis.call('TYPE', wake).ok
if wake_kind ~= 'list' and wake_kind ~= 'none' then
  return redis.error_reply('WRONGTYPE semaphore wake-up key is not a list')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = redis.call('ZSCORE', key, token)
if not score then
  return 0
end
redis.call('ZREM', key, token)
if tonumber(score) <= now then
  return 0
end
redis.call('LPUSH', wake, '1')
redis.call('LTRIM', wake, '0', string.format('%d', permits - 1))
redis.call('PEXPIRE', wake, '60000')
return 1
