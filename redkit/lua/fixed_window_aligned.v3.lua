--! keys: 1
--! Fixed window aligned to the clock: one counter per client AND window. The caller names
--! the window in the key (`rk:rl:<name>:{<client>}:<window number>`, the number from its
--! clock), so it knows when the window ends and the script need not read the TTL: ONE
--! command (INCRBY) on the common path.
--! KEYS[1] = the window's counter. ARGV[1] = limit, ARGV[2] = TTL in ms for a new counter,
--! ARGV[3] (optional, 1 when left out) = cost: each an integer 1..=2^53-1 (canonical decimal:
--! INCRBY refuses anything else for the cost; the TTL is passed on as the number it parses to).
--! Reply, one integer: c >= 0: counted, c = the counter afterwards; c < 0: NOT counted, the
--! counter is -c - 1 (left as it is: capped at 2^53-1). A cost above the limit is never counted
--! (the counter is only read, with GET). Errors (nothing written): REDKIT_INPUT for bad
--! arguments, REDKIT_DATA when the counter is not a non-negative integer, REDKIT_NOPERM when
--! the ACL user may not run INCRBY or PEXPIRE, WRONGTYPE as Redis says it.
--! Steps:
--!  - the arguments are checked as numbers (tonumber, integral, in range), and PEXPIRE with
--!    redis.acl_check_cmd, before anything is written;
--!  - INCRBY under redis.pcall: Redis parses the stored counter and the cost (string2ll:
--!    "05", " 5", "5.0", "1e3", a hash are refused) before it writes anything;
--!  - a new counter (INCRBY answered the cost) gets the TTL (PEXPIRE, allowed: checked above);
--!  - a count past the limit, or a stored count that was negative, is put back with INCRBY by
--!    -cost (the same command on the same key): the keyspace is as the call found it.
--! A counter found without a TTL (made by hand) is not given one on the common path; its key
--! is only used during its window.
local key = KEYS[1]
local limit_arg, ttl_arg, cost_arg = ARGV[1], ARGV[2], ARGV[3]
local limit, ttl, cost = tonumber(limit_arg), tonumber(ttl_arg), 1
if not cost_arg then
  cost_arg = '1'
elseif cost_arg ~= '1' then
  cost = tonumber(cost_arg)
end
if not (limit and ttl and cost and limit >= 1 and ttl >= 1 and cost >= 1
    and limit <= 9007199254740991 and ttl <= 9007199254740991 and cost <= 9007199254740991
    and limit % 1 == 0 and ttl % 1 == 0 and cost % 1 == 0) then
  return redis.error_reply('REDKIT_INPUT limit, ttl and cost must be integers 1..=2^53-1')
end
if cost > limit then
  -- Never counted: the counter is only read.
  local raw = redis.pcall('GET', key)
  if type(raw) == 'table' then
    if string.find(raw.err, "can't run", 1, true) then
      return redis.error_reply('REDKIT_NOPERM GET on the window counter')
    end
    return raw
  end
  local c = 0
  if raw then
    -- What INCRBY would accept, and not negative: '0' or [1-9][0-9]* below 2^63.
    local canonical = raw == '0' or (string.find(raw, '^[1-9]%d*$')
        and (#raw < 19 or (#raw == 19 and raw <= '9223372036854775807')))
    if not canonical then
      return redis.error_reply('REDKIT_DATA window counter is not a non-negative integer')
    end
    c = tonumber(raw)
    if c > 9007199254740991 then
      c = 9007199254740991
    end
  end
  return -c - 1
end
if not redis.acl_check_cmd('PEXPIRE', key, ttl_arg) then
  return redis.error_reply('REDKIT_NOPERM PEXPIRE on the window counter')
end

local count = redis.pcall('INCRBY', key, cost_arg)
if type(count) == 'number' and count > cost and count <= limit then
  -- The common path: a counter with room left.
  return count
end
if type(count) == 'table' then
  local err = count.err
  if string.find(err, "can't run", 1, true) then
    return redis.error_reply('REDKIT_NOPERM INCRBY on the window counter')
  end
  if string.find(err, 'overflow', 1, true) then
    -- A canonical counter near 2^63: far above every limit; nothing was written.
    return -9007199254740991 - 1
  end
  if string.find(err, 'not an integer', 1, true) then
    if not string.find(cost_arg, '^[1-9]%d*$') then
      return redis.error_reply('REDKIT_INPUT cost must be a canonical decimal integer')
    end
    return redis.error_reply('REDKIT_DATA window counter is not a non-negative integer')
  end
  return count
end
if count == cost then
  -- A new counter (or one holding 0): it gets its TTL.
  redis.call('PEXPIRE', key, string.format('%d', ttl))
  return count
end
-- Not counted: put back what this call added.
redis.call('INCRBY', key, '-' .. cost_arg)
if count < cost then
  return redis.error_reply('REDKIT_DATA window counter is not a non-negative integer')
end
count = count - cost
if count > 9007199254740991 then
  count = 9007199254740991
end
return -count - 1
