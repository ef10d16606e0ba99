--! keys: 1
--! flags: no-writes
--! A fixed window's counter (from the first hit or aligned to the clock), read without
--! counting. KEYS[1] = the window counter.
--! Returns {count, pttl_ms}: {0, -2} when there is no counter; pttl_ms -1 for a counter
--! without a TTL.
--! Errors: REDKIT_DATA when the counter is not a canonical non-negative integer below 2^53,
--! REDKIT_NOPERM when the ACL user may not run GET or PTTL, WRONGTYPE as Redis says it.
--! Declared read-only: sent as EVALSHA_RO / FCALL_RO (a replica may serve it); it writes
--! nothing.
local key = KEYS[1]
local nope = "can't run"
local raw = redis.pcall('GET', key)
if type(raw) == 'table' then
  if string.find(raw.err, nope, 1, true) then
    return redis.error_reply('REDKIT_NOPERM GET on the window counter')
  end
  return raw
end
if not raw then
  return {0, -2}
end
local digits = #raw
if not (raw == '0' or (string.match(raw, '^[1-9]%d*$') and (digits < 16
    or (digits == 16 and raw <= '9007199254740991')))) then
  return redis.error_reply('REDKIT_DATA window counter is not a non-negative integer')
end
local ttl = redis.pcall('PTTL', key)
if type(ttl) == 'table' then
  if string.find(ttl.err, nope, 1, true) then
    return redis.error_reply('REDKIT_NOPERM PTTL on the window counter')
  end
  return ttl
end
return {tonumber(raw), ttl}
