--! keys: 1
--! flags: no-writes
--! A GCRA bucket, read without taking from it. KEYS[1] = the client's theoretical arrival
--! time (TAT) in microseconds of the server's TIME. ARGV[1] = emission interval in us,
--! ARGV[2] = burst; each an integer >= 1 below 10^15, and interval * burst below 10^15.
--! Returns {remaining, reset_after_us, now_us}: cost-1 requests that would conform now, the
--! time until the bucket is full again, and the server time it was read at.
--! Errors: REDKIT_INPUT for bad arguments, REDKIT_DATA when the stored TAT is not a canonical
--! integer below 2^53, REDKIT_NOPERM when the ACL user may not run TIME or GET, WRONGTYPE as
--! Redis says it.
--! Declared read-only: sent as EVALSHA_RO / FCALL_RO (a replica may serve it); it writes
--! nothing.
local key = KEYS[1]
local interval = ARGV[1] and tonumber(ARGV[1])
if not (interval and interval >= 1 and interval < 1e15 and interval % 1 == 0) then
  return redis.error_reply('REDKIT_INPUT interval must be a positive integer of us')
end
local burst = ARGV[2] and tonumber(ARGV[2])
if not (burst and burst >= 1 and burst < 1e15 and burst % 1 == 0) then
  return redis.error_reply('REDKIT_INPUT burst must be a positive integer')
end
local tau = interval * burst
if tau >= 1e15 then
  return redis.error_reply('REDKIT_INPUT interval * burst must be below 10^15 us')
end
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
local tat = now
if raw then
  local digits = #raw
  if not (raw == '0' or (string.match(raw, '^[1-9]%d*$') and (digits < 16
      or (digits == 16 and raw <= '9007199254740991')))) then
    return redis.error_reply('REDKIT_DATA GCRA key is not a non-negative integer below 2^53')
  end
  local stored = tonumber(raw)
  if stored > now then
    tat = stored
  end
end
-- Cost-1 requests that fit in the room left: floor(room / interval), exact.
local room, n = tau - (tat - now), 0
if room >= interval then
  n = math.floor(room / interval)
  if n * interval > room then
    n = n - 1
  elseif (n + 1) * interval <= room then
    n = n + 1
  end
end
return {n, tat - now, now}
