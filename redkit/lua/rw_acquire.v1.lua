--! keys: 4
--! Takes a read-write lock for reading or writing, idempotently for its owner token.
--! KEYS[1] = readers ZSET (member = owner token, score = lease end in ms of server TIME),
--! KEYS[2] = writer key (the writer's token, lease as TTL), KEYS[3] = writer intent (the token
--! of the writer waiting first, with a short lease as TTL), KEYS[4] = fence key (last fencing
--! token issued); one hash slot.
--! ARGV[1] = 'read' or 'write', ARGV[2] = owner token (16 to 128 bytes), ARGV[3] = lease in ms,
--! ARGV[4] = intent lease in ms (both 1 to 2592000000), ARGV[5] = fence key ttl in ms (>= lease,
--! < 10^15).
--! Readers whose lease ended are dropped first. Read: granted unless a writer holds the lock
--! or a writer intent exists (a waiting writer blocks new readers: writers are not starved).
--! Write: granted when no writer holds it, no other writer's intent exists and no reader is
--! left; when readers are left the caller's intent is set (or refreshed) so no new reader gets
--! in. Every grant issues a fencing token max(stored + 1, server TIME in µs).
--! Returns {1, fence} when granted (a retry by the holder refreshes its lease and issues a new
--! token), {0, wait_ms} when not (until the blocking lease ends, as last seen).
--! Input, key types, stored data and the ACL of every command are checked before the first
--! write: an error reply changed nothing.
local readers, writer, intent, fence = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local mode, token, ttl_arg, intent_arg, fence_ttl_arg = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local MAX_TTL = 2592000000
local function int(s, max)
  local n = s and #s <= 15 and string.match(s, '^[1-9]%d*$') and tonumber(s)
  return n and n <= max and n
end
if mode ~= 'read' and mode ~= 'write' then
  return redis.error_reply('REDKIT_INPUT mode must be read or write')
end
if not token or #token < 16 or #token > 128 then
  return redis.error_reply('REDKIT_INPUT token must be 16 to 128 bytes')
end
local ttl, intent_ttl = int(ttl_arg, MAX_TTL), int(intent_arg, MAX_TTL)
if not ttl or not intent_ttl then
  return redis.error_reply('REDKIT_INPUT leases must be integers of ms in 1..2592000000')
end
local fence_ttl = int(fence_ttl_arg, 999999999999999)
if not fence_ttl or fence_ttl < ttl then
  return redis.error_reply('REDKIT_INPUT fence ttl must be an integer of ms >= ttl')
end
local checks = {
  {'TYPE', readers}, {'TYPE', writer}, {'TYPE', intent}, {'TYPE', fence}, {'GET', fence},
  {'GET', writer}, {'GET', intent}, {'TIME'}, {'ZRANGE', readers, '0', '0'},
  {'ZREMRANGEBYSCORE', readers, '-inf', '0'}, {'ZCARD', readers}, {'PTTL', writer},
  {'ZADD', readers, '0', token}, {'PTTL', readers}, {'PEXPIRE', readers, ttl_arg},
  {'SET', writer, token, 'PX', ttl_arg}, {'SET', intent, token, 'PX', intent_arg},
  {'DEL', intent}, {'SET', fence, '1', 'PX', fence_ttl_arg},
}
for _, c in ipairs(checks) do
  if not redis.acl_check_cmd(unpack(c)) then
    return redis.error_reply('REDKIT_NOPERM ' .. c[1] .. ' is denied to this user')
  end
end
local kinds = {{readers, 'zset'}, {writer, 'string'}, {intent, 'string'}, {fence, 'string'}}
for _, k in ipairs(kinds) do
  local kind = redis.call('TYPE', k[1]).ok
  if kind ~= k[2] and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE read-write lock key is not a ' .. k[2])
  end
end
local MAX_FENCE = '9007199254740991'
local stored = redis.call('GET', fence)
if stored and stored ~= '0' and not (string.match(stored, '^[1-9]%d*$')
    and (#stored < #MAX_FENCE or (#stored == #MAX_FENCE and stored <= MAX_FENCE))) then
  return redis.error_reply('REDKIT_DATA fence key is not an integer in 0..2^53-1')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local last = redis.call('ZRANGE', readers, '-1', '-1', 'WITHSCORES')
local latest = last[2] and tonumber(last[2])
if last[2] and not (latest and latest <= now + MAX_TTL) then
  return redis.error_reply('REDKIT_DATA read-write lock lease end lies beyond the longest lease')
end
local next = tonumber(t[1]) * 1000000 + tonumber(t[2])
if stored and tonumber(stored) + 1 > next then
  next = tonumber(stored) + 1
end
if next > tonumber(MAX_FENCE) then
  return redis.error_reply('REDKIT_DATA fence would pass 2^53-1')
end
local next_text = string.format('%.0f', next)
local holder = redis.call('GET', writer)
local waiting = redis.call('GET', intent)
-- Writes from here on (every command checked above).
redis.call('ZREMRANGEBYSCORE', readers, '-inf', string.format('%.0f', now))
if holder and holder ~= token then
  return {0, redis.call('PTTL', writer)}
end
if mode == 'read' then
  if waiting then
    return {0, redis.call('PTTL', intent)}
  end
  redis.call('ZADD', readers, string.format('%.0f', now + ttl), token)
  if redis.call('PTTL', readers) < ttl then
    redis.call('PEXPIRE', readers, ttl_arg)
  end
  redis.call('SET', fence, next_text, 'PX', fence_ttl_arg)
  return {1, next}
end
if waiting and waiting ~= token then
  return {0, redis.call('PTTL', intent)}
end
if redis.call('ZCARD', readers) > 0 then
  redis.call('SET', intent, token, 'PX', intent_arg)
  local first = redis.call('ZRANGE', readers, '0', '0', 'WITHSCORES')
  return {0, tonumber(first[2]) - now}
end
redis.call('SET', writer, token, 'PX', ttl_arg)
if waiting then
  redis.call('DEL', intent)
end
redis.call('SET', fence, next_text, 'PX', fence_ttl_arg)
return {1, next}
