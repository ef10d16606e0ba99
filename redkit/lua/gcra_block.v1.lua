--! keys: 1
--! Blocks a client of a GCRA limiter for a while: its theoretical arrival time (TAT) moves so
--! that the first cost-1 request conforms when the block ends, every check before is refused
--! with the exact retry_after, at no cost to the check; after the block the bucket refills
--! from empty. A block never shortens what the client already waits for (a later TAT stays).
--! KEYS[1] = the client's TAT in microseconds of the server's TIME. ARGV[1] = emission
--! interval in us, ARGV[2] = burst, ARGV[3] = the block in us; each an integer >= 1 below
--! 10^15, and interval * burst + block below 10^15.
--! Returns the block's length in us: the time until a cost-1 request conforms.
--! Errors (nothing written): REDKIT_INPUT for bad arguments, REDKIT_DATA when the stored TAT
--! is not a canonical integer below 2^53, REDKIT_NOPERM when the ACL user may not run TIME,
--! GET or SET, WRONGTYPE as Redis says it. One write: SET PX.
local key = KEYS[1]
local interval = ARGV[1] and tonumber(ARGV[1])
local burst = ARGV[2] and tonumber(ARGV[2])
local block = ARGV[3] and tonumber(ARGV[3])
if not (interval and burst and block and interval >= 1 and burst >= 1 and block >= 1
    and interval % 1 == 0 and burst % 1 == 0 and block % 1 == 0
    and interval * burst + block < 1e15) then
  return redis.error_reply('REDKIT_INPUT interval, burst and block must be positive integers below 10^15 together')
end
local tau = interval * burst
local nope = "can't run"
local t = redis.pcall('TIME')
if t.err then
  if string.find(t.err, nope, 1, true) then
    return redis.error_reply('REDKIT_NOPERM TIME on the GCRA key')
  end
  return t
end
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local raw = redis.pcall('GET', key)
if type(raw) == 'table' then
  if string.find(raw.err, nope, 1, true) then
    return redis.error_reply('REDKIT_NOPERM GET on the GCRA key')
  end
  return raw
end
-- A cost-1 request conforms at tat - tau + interval: the block's end.
local tat = now + block + tau - interval
if raw then
  local digits = #raw
  if not (raw == '0' or (string.match(raw, '^[1-9]%d*$') and (digits < 16
      or (digits == 16 and raw <= '9007199254740991')))) then
    return redis.error_reply('REDKIT_DATA GCRA key is not a non-negative integer below 2^53')
  end
  local stored = tonumber(raw)
  if stored > tat then
    tat = stored
  end
end
local set = redis.pcall('SET', key, string.format('%d', tat), 'PX',
  string.format('%d', math.floor((tat - now + 999) / 1000)))
if set.err then
  if string.find(set.err, nope, 1, true) then
    return redis.error_reply('REDKIT_NOPERM SET on the GCRA key')
  end
  return set
end
return tat - tau + interval - now
