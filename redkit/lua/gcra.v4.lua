--! keys: 1
--! GCRA (generic cell rate algorithm: token-bucket semantics).
--! KEYS[1] = the client's theoretical arrival time (TAT), in microseconds of the server's
--! TIME, as a canonical decimal integer. ARGV[1] = emission interval in us (one unit per
--! interval), ARGV[2] = burst (units a full bucket holds), ARGV[3] (optional, 1 when left out)
--! = cost; each an integer >= 1 below 10^15 in any form Lua's tonumber reads as that number
--! (none of them is written as given), and interval * burst (the bucket, in us) below 10^15.
--! A cost above burst can never conform: its retry_after_us is 0.
--! Returns {allowed (1|0), remaining, retry_after_us, reset_after_us, now_us}:
--!  - remaining: cost-1 requests that would still conform right now (after this one);
--!  - retry_after_us: when not allowed, time until this request would conform (0 otherwise);
--!  - reset_after_us: time until the bucket is full again (the key's TTL once written);
--!  - now_us: the server time the decision was taken at.
--! Errors (nothing written): REDKIT_INPUT for bad arguments, REDKIT_DATA when the stored TAT
--! is not a canonical integer below 2^53, REDKIT_NOPERM when the ACL user may not run TIME,
--! GET or SET, WRONGTYPE as Redis says it.
--! A request that does not conform changes nothing. Nothing is half-applied: the reads (TIME,
--! GET) come first, the stored TAT is parsed strictly (Redis integer rules, below 2^53), and an
--! allowed request writes with ONE command (SET PX, the TTL = time until the bucket is full),
--! of a value the script computed itself. Work is constant.
local key = KEYS[1]
local interval_arg, burst_arg, cost_arg = ARGV[1], ARGV[2], ARGV[3]

-- Each argument a positive integer below 10^15 (exact as a Lua number); the cost converted
-- only when it is not "1".
local interval = interval_arg and tonumber(interval_arg)
if not (interval and interval >= 1 and interval < 1e15 and interval % 1 == 0) then
  return redis.error_reply('REDKIT_INPUT interval must be a positive integer of us')
end
local burst = burst_arg and tonumber(burst_arg)
if not (burst and burst >= 1 and burst < 1e15 and burst % 1 == 0) then
  return redis.error_reply('REDKIT_INPUT burst must be a positive integer')
end
local cost = 1
if cost_arg and cost_arg ~= '1' then
  cost = tonumber(cost_arg)
  if not (cost and cost >= 1 and cost < 1e15 and cost % 1 == 0) then
    return redis.error_reply('REDKIT_INPUT cost must be a positive integer')
  end
end
local tau = interval * burst
if tau >= 1e15 then
  return redis.error_reply('REDKIT_INPUT interval * burst must be below 10^15 us')
end

-- A refused command's reply: the ACL's refusal as REDKIT_NOPERM, anything else (WRONGTYPE)
-- as Redis says it.
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
  -- Redis's string2ll rules, non-negative, and exact as a Lua number (< 2^53).
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

local new_tat = tat + interval * cost
local full = new_tat - now
if cost <= burst and full <= tau then
  local set = redis.pcall('SET', key, string.format('%d', new_tat), 'PX',
    string.format('%d', math.floor((full + 999) / 1000)))
  if set.err then
    if string.find(set.err, nope, 1, true) then
      return redis.error_reply('REDKIT_NOPERM SET on the GCRA key')
    end
    return set
  end
  -- Cost-1 requests that fit in the room left: floor(room / interval), exact.
  local room, n = tau - full, 0
  if room >= interval then
    n = math.floor(room / interval)
    if n * interval > room then
      n = n - 1
    elseif (n + 1) * interval <= room then
      n = n + 1
    end
  end
  return {1, n, 0, full, now}
end

-- Not conforming (or a cost above the burst, which never conforms): nothing written.
local room, n = tau - (tat - now), 0
if room >= interval then
  n = math.floor(room / interval)
  if n * interval > room then
    n = n - 1
  elseif (n + 1) * interval <= room then
    n = n + 1
  end
end
if cost > burst then
  return {0, n, 0, tat - now, now}
end
-- It would conform at (new_tat - tau).
return {0, n, new_tat - tau - now, tat - now, now}
