--! keys: 1
--! Takes one permit of a semaphore, idempotently for its owner token. KEYS[1] = the holders
--! ZSET (member = owner token, score = lease end in ms of server TIME).
--! ARGV[1] = owner token (16 to 128 bytes), ARGV[2] = permits (1 to 1000000),
--! ARGV[3] = lease in ms (1 to 2592000000).
--! Expired holders are dropped first (ZREMRANGEBYSCORE, at most `permits` entries exist).
--! Returns {1, holders} when acquired: a free permit was taken, or this token already held one
--! (a retry after a lost reply: its lease is refreshed). Returns {0, holders, retry_after_ms}
--! when all permits are held by others (retry_after_ms: until the earliest lease ends).
--! The key's TTL is raised to the longest lease (never lowered), so no forever-key remains.
--! Everything is checked before the first write (input, key type, stored lease ends within
--! the longest lease, ACL of every command with the real key): an error reply changed nothing.
local key = KEYS[1]
local token, permits_arg, ttl_arg = ARGV[1], ARGV[2], ARGV[3]
local function int(s, max)
  local n = s and #s <= 10 and string.match(s, '^[1-9]%d*$') and tonumber(s)
  return n and n <= max and n
end
if not token or #token < 16 or #token > 128 then
  return redis.error_reply('REDKIT_INPUT token must be 16 to 128 bytes')
end
local permits = int(permits_arg, 1000000)
if not permits then
  return redis.error_reply('REDKIT_INPUT permits must be an integer in 1..1000000')
end
local MAX_TTL = 2592000000
local ttl = int(ttl_arg, MAX_TTL)
if not ttl then
  return redis.error_reply('REDKIT_INPUT ttl must be an integer of ms in 1..2592000000')
end
local checks = {
  {'TYPE', key}, {'TIME'}, {'ZRANGE', key, '0', '0'}, {'ZREMRANGEBYSCORE', key, '-inf', '0'},
  {'ZSCORE', key, token}, {'ZCARD', key}, {'ZADD', key, '0', token}, {'PTTL', key},
  {'PEXPIRE', key, ttl_arg},
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
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local last = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
local latest = last[2] and tonumber(last[2])
if last[2] and not (latest and latest <= now + MAX_TTL) then
  return redis.error_reply('REDKIT_DATA semaphore lease end lies beyond the longest lease')
end
redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%.0f', now))
local mine = redis.call('ZSCORE', key, token)
local holders = redis.call('ZCARD', key)
if not mine and holders >= permits then
  local first = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')
  return {0, holders, tonumber(first[2]) - now}
end
redis.call('ZADD', key, string.format('%.0f', now + ttl), token)
if not mine then
  holders = holders + 1
end
local pttl = redis.call('PTTL', key)
if pttl < ttl then
  redis.call('PEXPIRE', key, ttl)
end
return {1, holders}
