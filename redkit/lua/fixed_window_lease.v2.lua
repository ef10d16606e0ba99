--! keys: 1
--! Fixed-window lease: takes up to `want` units of a counter's current window at once, so
--! an instance can answer the next checks of its key from the units it holds. The counter is
--! fixed_window's (same key, same count): the units are counted here, so the sum over
--! every instance, leasing or not, never passes the limit.
--! KEYS[1] = window counter. ARGV[1] = limit, ARGV[2] = window in ms, ARGV[3] = cost (the
--! units this call needs), ARGV[4] = want (the units it asks for): canonical decimal integers
--! 1..=2^53-1 with cost <= want <= limit.
--! Reply {granted, count, pttl_ms}: with at least `cost` units left, granted = min(want,
--! limit - count) and count is the counter after the grant; else granted = 0, nothing is
--! written and count is the counter as found. pttl_ms is the window's time left (PTTL; the
--! window itself when this call started it, -1 for a counter without a TTL it refused).
--! The ACL of every command it may run, the key's type (GET) and the stored count (a canonical
--! decimal integer 0..=2^53-1) are checked before the one write (SET or INCRBY, then PEXPIRE
--! for a counter without a TTL): an error reply changed nothing.
local key = KEYS[1]
local function int(s)
  local n = s and #s <= 16 and string.match(s, '^[1-9]%d*$') and tonumber(s)
  return n and n <= 9007199254740991 and n
end
local limit, window, cost, want = int(ARGV[1]), int(ARGV[2]), int(ARGV[3]), int(ARGV[4])
if not (limit and window and cost and want) or cost > want or want > limit then
  return redis.error_reply('REDKIT_INPUT limit, window, cost and want must be integers 1..=2^53-1 with cost <= want <= limit')
end
local checks = {
  {'GET', key}, {'PTTL', key}, {'SET', key, '1', 'PX', ARGV[2]},
  {'INCRBY', key, '1'}, {'PEXPIRE', key, ARGV[2]},
}
for _, c in ipairs(checks) do
  if not redis.acl_check_cmd(unpack(c)) then
    return redis.error_reply('REDKIT_NOPERM ' .. c[1] .. ' on the window counter')
  end
end
local stored = redis.pcall('GET', key)
if type(stored) == 'table' and stored.err then
  return redis.error_reply('WRONGTYPE the window counter is not a string')
end
local count = 0
if stored then
  count = (stored == '0' and 0) or int(stored)
  if not count then
    return redis.error_reply('REDKIT_DATA the window counter is not a count')
  end
end
local ttl = redis.call('PTTL', key)
if limit - count < cost then
  return {0, count, ttl}
end
local take = math.min(want, limit - count)
if not stored then
  redis.call('SET', key, take, 'PX', window)
  return {take, take, window}
end
count = redis.call('INCRBY', key, take)
if ttl < 0 then
  redis.call('PEXPIRE', key, window)
  ttl = window
end
return {take, count, ttl}
