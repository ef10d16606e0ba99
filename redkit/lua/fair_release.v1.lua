--! keys: 3
--! Leaves a fair lock's queue (release by the holder, or a waiter giving up) and wakes the
--! one waiting behind. KEYS[1] = queue ZSET, KEYS[2] = leases ZSET, KEYS[3] = this token's
--! "gone" list, which its successor blocks on (all in one hash slot).
--! ARGV[1] = owner token (16 to 128 bytes).
--! Returns 1 when the token was the head with an unexpired lease (it held the lock), 0 when
--! it was a waiter, expired, or absent. When it was in the queue it is removed and one entry is
--! pushed to its "gone" list (at most one entry, 60 s TTL: bounded notifications).
--! Input, key types and the ACL of every command are checked first: an error changed nothing.
local queue, leases, gone = KEYS[1], KEYS[2], KEYS[3]
local token = ARGV[1]
if not token or #token < 16 or #token > 128 then
  return redis.error_reply('REDKIT_INPUT token must be 16 to 128 bytes')
end
local checks = {
  {'TYPE', queue}, {'TYPE', leases}, {'TYPE', gone}, {'TIME'}, {'ZRANGE', queue, '0', '0'},
  {'ZSCORE', queue, token}, {'ZSCORE', leases, token}, {'ZREM', queue, token},
  {'ZREM', leases, token}, {'LPUSH', gone, '1'}, {'LTRIM', gone, '0', '0'},
  {'PEXPIRE', gone, '60000'},
}
for _, c in ipairs(checks) do
  if not redis.acl_check_cmd(unpack(c)) then
    return redis.error_reply('REDKIT_NOPERM ' .. c[1] .. ' is denied to this user')
  end
end
for _, k in ipairs({queue, leases}) do
  local kind = redis.call('TYPE', k).ok
  if kind ~= 'zset' and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE fair lock key is not a sorted set')
  end
end
local gone_kind = redis.call('TYPE', gone).ok
if gone_kind ~= 'list' and gone_kind ~= 'none' then
  return redis.error_reply('WRONGTYPE fair lock wake-up key is not a list')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if not redis.call('ZSCORE', queue, token) then
  redis.call('ZREM', leases, token)
  return 0
end
local head = redis.call('ZRANGE', queue, '0', '0')[1]
local score = redis.call('ZSCORE', leases, token)
local held = head == token and score and tonumber(score) > now
redis.call('ZREM', queue, token)
redis.call('ZREM', leases, token)
redis.call('LPUSH', gone, '1')
redis.call('LTRIM', gone, '0', '0')
redis.call('PEXPIRE', gone, '60000')
if held then
  return 1
end
return 0
