--! keys: 3
--! Sets the size of one owner's block of a semaphore's permits: grows it from the free
--! permits, shrinks it, or renews it, in one call. KEYS[1] = the holders ZSET (member = a
--! permit's owner, score = its lease end in ms of server TIME), KEYS[2] = the wake-up list,
--! KEYS[3] = the contention mark (a one-entry list with a TTL) of the same resource (same
--! hash slot).
--! ARGV[1] = block token (16 to 128 bytes of [0-9A-Za-z_-]), ARGV[2] = permits (1 to 1000000),
--! ARGV[3] = lease in ms (1 to 2592000000), ARGV[4] = want: the block's size after the call
--! (0 to permits; 0 gives the block back), ARGV[5] = how long a contention mark lasts, in ms
--! (1 to 2592000000).
--! A block of size k is the k members `<token>#1` .. `<token>#k`, all with one lease end, so a
--! plain acquire of the same semaphore counts each of them as one holder.
--! Expired holders are dropped first. The block's size now is the run of its members from #1
--! (all end together: either all of them or none is there). A smaller want removes the
--! members above it (and pushes one wake-up); a larger one adds members while fewer than
--! `permits` holders exist, and when it gets less than it asked for it sets the contention
--! mark (so that every block holder learns that an owner wants more than is free). Every
--! member left gets the lease `now + ttl`; the key's TTL is raised to it (never lowered).
--! Returns {size, had, holders, retry_after_ms, contended_ms}: size = the block's size now
--! (below want when the semaphore was full), had = its size before the call (0 after a lost
--! lease or a server restart), holders = every unexpired holder now, retry_after_ms = until
--! the earliest other lease ends when size < want, else 0, contended_ms = how long the
--! contention mark lasts from now (0: none).
--! Everything is checked before the first write (input, key types, stored lease ends within
--! the longest lease, ACL of every command with the real keys): an error changed nothing.
local key, wake, mark = KEYS[1], KEYS[2], KEYS[3]
local token, permits_arg, ttl_arg, want_arg, mark_arg = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local function int(s, min, max)
  local n = s and #s <= 10 and string.match(s, '^%d+$') and tonumber(s)
  return n and n >= min and n <= max and n
end
if not token or #token < 16 or #token > 128 or not string.match(token, '^[%w_-]+$') then
  return redis.error_reply('REDKIT_INPUT token must be 16 to 128 bytes of [0-9A-Za-z_-]')
end
local permits = int(permits_arg, 1, 1000000)
if not permits then
  return redis.error_reply('REDKIT_INPUT permits must be an integer in 1..1000000')
end
local MAX_TTL = 2592000000
local ttl = int(ttl_arg, 1, MAX_TTL)
if not ttl then
  return redis.error_reply('REDKIT_INPUT ttl must be an integer of ms in 1..2592000000')
end
local want = int(want_arg, 0, permits)
if not want then
  return redis.error_reply('REDKIT_INPUT want must be an integer in 0..permits')
end
local mark_ms = int(mark_arg, 1, MAX_TTL)
if not mark_ms then
  return redis.error_reply('REDKIT_INPUT mark must be an integer of ms in 1..2592000000')
end
local member = function(i)
  return token .. '#' .. i
end
local checks = {
  {'TYPE', key}, {'TYPE', wake}, {'TIME'}, {'ZRANGE', key, '0', '0'},
  {'ZREMRANGEBYSCORE', key, '-inf', '0'}, {'ZSCORE', key, token}, {'ZCARD', key},
  {'ZADD', key, '0', token}, {'ZREM', key, token}, {'PTTL', key}, {'PEXPIRE', key, ttl_arg},
  {'LPUSH', wake, '1'}, {'LTRIM', wake, '0', '0'}, {'PEXPIRE', wake, '60000'},
  {'TYPE', mark}, {'LPUSH', mark, '1'}, {'LTRIM', mark, '0', '0'}, {'PEXPIRE', mark, mark_arg},
  {'PTTL', mark},
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
local mark_kind = redis.call('TYPE', mark).ok
if mark_kind ~= 'list' and mark_kind ~= 'none' then
  return redis.error_reply('WRONGTYPE semaphore contention mark is not a list')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local last = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
local latest = last[2] and tonumber(last[2])
if last[2] and not (latest and latest <= now + MAX_TTL) then
  return redis.error_reply('REDKIT_DATA semaphore lease end lies beyond the longest lease')
end
redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%.0f', now))
local had = 0
while had < permits and redis.call('ZSCORE', key, member(had + 1)) do
  had = had + 1
end
local holders = redis.call('ZCARD', key)
local size = want
if want > had then
  local free = permits - holders
  if free < 0 then
    free = 0
  end
  size = had + math.min(want - had, free)
end
for i = size + 1, had do
  redis.call('ZREM', key, member(i))
end
local ends = string.format('%.0f', now + ttl)
local i = 1
while i <= size do
  local batch = {}
  local last_of_batch = math.min(size, i + 499)
  for j = i, last_of_batch do
    batch[#batch + 1] = ends
    batch[#batch + 1] = member(j)
  end
  redis.call('ZADD', key, unpack(batch))
  i = last_of_batch + 1
end
holders = holders - had + size
if size > 0 and redis.call('PTTL', key) < ttl then
  redis.call('PEXPIRE', key, ttl)
end
if size < had then
  redis.call('LPUSH', wake, '1')
  redis.call('LTRIM', wake, '0', string.format('%d', permits - 1))
  redis.call('PEXPIRE', wake, '60000')
end
local retry = 0
if size < want then
  local first = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')
  retry = first[2] and (tonumber(first[2]) - now) or 0
  redis.call('LPUSH', mark, '1')
  redis.call('LTRIM', mark, '0', '0')
  redis.call('PEXPIRE', mark, mark_arg)
end
local contended = redis.call('PTTL', mark)
if contended < 0 then
  contended = 0
end
return {size, had, holders, retry, contended}
