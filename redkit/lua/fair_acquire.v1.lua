--! keys: 3
--! Joins (or stays in) a fair lock's queue; the head of the queue holds the lock.
--! KEYS[1] = queue ZSET (member = owner token, score = arrival number), KEYS[2] = leases ZSET
--! (member = owner token, score = lease end in ms of server TIME), KEYS[3] = fence key (the
--! last arrival number issued), all in one hash slot.
--! ARGV[1] = owner token (16 to 128 bytes), ARGV[2] = holder lease in ms, ARGV[3] = waiter
--! lease in ms (both 1 to 2592000000), ARGV[4] = fence key ttl in ms (>= holder lease, < 10^15).
--! A new token gets arrival number max(stored + 1, server TIME in microseconds): arrival order
--! is queue order, and as holders follow arrival order, the arrival number is the holder's
--! fencing token (strictly increasing from holder to holder, never backwards).
--! Dead entries go first: up to 100 whose lease ended (ZRANGEBYSCORE ... LIMIT), then the
--! caller's predecessors while their lease has ended or is missing (at most 100 per call).
--! Returns {1, fence} when the caller is the head (its lease is now the holder lease), or
--! {0, fence, ahead, predecessor_token, predecessor_lease_left_ms} when it waits (its lease is
--! now the waiter lease: each call is its heartbeat).
--! Input, key types, stored data (fence: Redis integer rules below 2^53; lease ends within the
--! longest lease) and the ACL of every command (real keys) are checked before the first write:
--! an error reply changed nothing.
local queue, leases, fence = KEYS[1], KEYS[2], KEYS[3]
local token, ttl_arg, waiter_arg, fence_ttl_arg = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local MAX_TTL = 2592000000
local function int(s, max)
  local n = s and #s <= 15 and string.match(s, '^[1-9]%d*$') and tonumber(s)
  return n and n <= max and n
end
if not token or #token < 16 or #token > 128 then
  return redis.error_reply('REDKIT_INPUT token must be 16 to 128 bytes')
end
local ttl, waiter = int(ttl_arg, MAX_TTL), int(waiter_arg, MAX_TTL)
if not ttl or not waiter then
  return redis.error_reply('REDKIT_INPUT leases must be integers of ms in 1..2592000000')
end
local fence_ttl = int(fence_ttl_arg, 999999999999999)
if not fence_ttl or fence_ttl < ttl then
  return redis.error_reply('REDKIT_INPUT fence ttl must be an integer of ms >= ttl')
end
local checks = {
  {'TYPE', queue}, {'TYPE', leases}, {'TYPE', fence}, {'GET', fence}, {'TIME'},
  {'ZRANGE', leases, '0', '0'}, {'ZRANGEBYSCORE', leases, '-inf', '0'}, {'ZSCORE', queue, token},
  {'ZRANK', queue, token}, {'ZREM', queue, token}, {'ZREM', leases, token},
  {'ZADD', queue, '0', token}, {'ZADD', leases, '0', token}, {'SET', fence, '1', 'PX', fence_ttl_arg},
  {'PTTL', queue}, {'PEXPIRE', queue, ttl_arg}, {'PEXPIRE', leases, ttl_arg},
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
local fence_kind = redis.call('TYPE', fence).ok
if fence_kind ~= 'string' and fence_kind ~= 'none' then
  return redis.error_reply('WRONGTYPE fair lock fence key is not a string')
end
local MAX_FENCE = '9007199254740991'
local stored = redis.call('GET', fence)
if stored and stored ~= '0' and not (string.match(stored, '^[1-9]%d*$')
    and (#stored < #MAX_FENCE or (#stored == #MAX_FENCE and stored <= MAX_FENCE))) then
  return redis.error_reply('REDKIT_DATA fence key is not an integer in 0..2^53-1')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local last = redis.call('ZRANGE', leases, '-1', '-1', 'WITHSCORES')
local latest = last[2] and tonumber(last[2])
if last[2] and not (latest and latest <= now + MAX_TTL) then
  return redis.error_reply('REDKIT_DATA fair lock lease end lies beyond the longest lease')
end
local mine = redis.call('ZSCORE', queue, token)
local next = tonumber(t[1]) * 1000000 + tonumber(t[2])
if stored and tonumber(stored) + 1 > next then
  next = tonumber(stored) + 1
end
if not mine and next > tonumber(MAX_FENCE) then
  return redis.error_reply('REDKIT_DATA fence would pass 2^53-1')
end
-- Writes from here on (every command checked above).
local now_text = string.format('%.0f', now)
local dead = redis.call('ZRANGEBYSCORE', leases, '-inf', now_text, 'LIMIT', '0', '100')
for _, d in ipairs(dead) do
  if d ~= token then
    redis.call('ZREM', queue, d)
    redis.call('ZREM', leases, d)
  end
end
if mine then
  mine = tonumber(mine)
else
  mine = next
  local text = string.format('%.0f', next)
  redis.call('ZADD', queue, text, token)
  redis.call('SET', fence, text, 'PX', fence_ttl_arg)
end
local rank = redis.call('ZRANK', queue, token)
local pred, left = nil, 0
for _ = 1, 100 do
  if rank == 0 then
    break
  end
  pred = redis.call('ZRANGE', queue, rank - 1, rank - 1)[1]
  local pend = redis.call('ZSCORE', leases, pred)
  if pend and tonumber(pend) > now then
    left = tonumber(pend) - now
    break
  end
  redis.call('ZREM', queue, pred)
  redis.call('ZREM', leases, pred)
  rank = rank - 1
end
local lease = waiter
if rank == 0 then
  lease = ttl
end
redis.call('ZADD', leases, string.format('%.0f', now + lease), token)
local longest = lease
if latest and latest - now > longest then
  longest = latest - now
end
if redis.call('PTTL', queue) < longest then
  redis.call('PEXPIRE', queue, longest)
  redis.call('PEXPIRE', leases, longest)
end
if rank == 0 then
  return {1, mine}
end
return {0, mine, rank, pred, left}
