--! keys: 1
--! Blocks a client of a fixed window (from the first hit) for a while: its counter holds at
--! least the limit until the block ends, so every check is refused with the block's end as
--! its retry_after, at no cost to the check. A block never shortens what the client already
--! waits for: it ends at the later of now + the block and the current window's end.
--! KEYS[1] = the window counter. ARGV[1] = limit, ARGV[2] = the block in ms; each an integer
--! 1..=2^53-1.
--! Returns the block's length in ms (the counter's TTL).
--! Errors (nothing written): REDKIT_INPUT for bad arguments, REDKIT_DATA when the counter is
--! not a canonical non-negative integer below 2^53, REDKIT_NOPERM when the ACL user may not
--! run GET, PTTL or SET, WRONGTYPE as Redis says it. One write: SET PX.
local key = KEYS[1]
local limit = ARGV[1] and tonumber(ARGV[1])
local block = ARGV[2] and tonumber(ARGV[2])
if not (limit and block and limit >= 1 and block >= 1 and limit <= 9007199254740991
    and block <= 9007199254740991 and limit % 1 == 0 and block % 1 == 0) then
  return redis.error_reply('REDKIT_INPUT limit and block must be integers 1..=2^53-1')
end
local nope = "can't run"
local raw = redis.pcall('GET', key)
if type(raw) == 'table' then
  if string.find(raw.err, nope, 1, true) then
    return redis.error_reply('REDKIT_NOPERM GET on the window counter')
  end
  return raw
end
local count = 0
if raw then
  local digits = #raw
  if not (raw == '0' or (string.match(raw, '^[1-9]%d*$') and (digits < 16
      or (digits == 16 and raw <= '9007199254740991')))) then
    return redis.error_reply('REDKIT_DATA window counter is not a non-negative integer')
  end
  count = tonumber(raw)
  local ttl = redis.pcall('PTTL', key)
  if type(ttl) == 'table' then
    if string.find(ttl.err, nope, 1, true) then
      return redis.error_reply('REDKIT_NOPERM PTTL on the window counter')
    end
    return ttl
  end
  if ttl > block then
    block = ttl
  end
end
if not redis.acl_check_cmd('SET', key, '0', 'PX', '1') then
  return redis.error_reply('REDKIT_NOPERM SET on the window counter')
end
if count < limit then
  count = limit
end
redis.call('SET', key, string.format('%d', count), 'PX', string.format('%d', block))
return block
