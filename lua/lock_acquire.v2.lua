--! keys: 2
--! Acquires a lock, idempotently for its owner token. KEYS[1] = lock key, KEYS[2] = fence key
--! of the same resource (same hash slot): the last fencing token issued, with an expiry.
--! ARGV[1] = owner token (16 to 128 bytes), ARGV[2] = ttl in ms, ARGV[3] = fence key ttl in ms
--! (integers, 1 <= ttl <= fence ttl < 10^15).
--! Returns {1, fencing_token} when acquired: the lock was free (SET PX, then the fence key is
--! set to max(stored + 1, server TIME in microseconds) with the fence ttl), or it already held
--! this very token (a retry after a lost reply: both TTLs are refreshed and the stored token is
--! answered again).
--! Returns {0, pttl_ms} when another owner holds it (pttl -1: the holder's key has no TTL).
--! Everything is checked before the first write (input, stored fence by Redis integer rules and
--! below 2^53, ACL of every command with the real keys): an error reply means nothing changed.
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
local checks = {
  {'GET', lock}, {'GET', fence}, {'TIME'}, {'PTTL', lock},
  {'SET', lock, token, 'PX', ttl_arg}, {'SET', fence, '1', 'PX', fence_ttl_arg},
  {'PEXPIRE', lock, ttl_arg}, {'PEXPIRE', fence, fence_ttl_arg},
}
for _, c in ipairs(checks) do
  if not redis.acl_check_cmd(unpack(c)) then
    return redis.error_reply('REDKIT_NOPERM ' .. c[1] .. ' is denied to this user')
  end
end
-- Largest token a Lua number holds exactly (2^53 - 1).
local MAX_FENCE = '9007199254740991'
local holder = redis.call('GET', lock)
local stored = redis.call('GET', fence)
if stored and stored ~= '0' and not (string.match(stored, '^[1-9]%d*$')
    and (#stored < #MAX_FENCE or (#stored == #MAX_FENCE and stored <= MAX_FENCE))) then
  return redis.error_reply('REDKIT_DATA fence key is not an integer in 0..2^53-1')
end
if holder and holder ~= token then
  return {0, redis.call('PTTL', lock)}
end
if holder and stored then
  redis.call('PEXPIRE', lock, ttl_arg)
  redis.call('PEXPIRE', fence, fence_ttl_arg)
  return {1, tonumber(stored)}
end
local t = redis.call('TIME')
local next = tonumber(t[1]) * 1000000 + tonumber(t[2])
if stored and tonumber(stored) + 1 > next then
  next = tonumber(stored) + 1
end
if next > tonumber(MAX_FENCE) then
  return redis.error_reply('REDKIT_DATA fence would pass 2^53-1')
end
if holder then
  redis.call('PEXPIRE', lock, ttl_arg)
else
  redis.call('SET', lock, token, 'PX', ttl_arg)
end
redis.call('SET', fence, string.format('%.0f', next), 'PX', fence_ttl_arg)
return {1, next}
