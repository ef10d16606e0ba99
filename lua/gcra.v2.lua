--! keys: 1
--! GCRA (generic cell rate algorithm: token-bucket semantics), v2: v1's steps, reply and
--! errors, with the arguments read as v7 of the fixed window reads them: each converted once
--! with tonumber and checked as a number (v1 matched each against a pattern first, about 5 %
--! of the script's server time), the cost only when it is not "1" (compared as a string, which
--! Lua interns). KEYS[1] = the client's theoretical arrival time (TAT), in microseconds of the
--! server's TIME, as a canonical decimal integer. ARGV[1] = emission interval in us (one unit
--! per interval), ARGV[2] = burst (units a full bucket holds), ARGV[3] = cost; each an integer
--! >= 1 below 10^15 in any form Lua's tonumber reads as that number (none of them is written
--! as given), and interval * burst (the bucket, in us) below 10^15. A cost above burst can
--! never conform: its retry_after_us is 0.
--! Returns {allowed (1|0), remaining, retry_after_us, reset_after_us, now_us}:
--!  - remaining: cost-1 requests that would still conform right now (after this one);
--!  - retry_after_us: when not allowed, time until this request would conform (0 otherwise);
--!  - reset_after_us: time until the bucket is full again (the key's TTL once written);
--!  - now_us: the server time the decision was taken at.
--! A request that does not conform changes nothing. Nothing is half-applied: the reads (TIME,
--! GET) come first, the stored TAT is parsed strictly (Redis integer rules, below 2^53), and an
--! allowed request writes with ONE command (SET PX, the TTL = time until the bucket is full),
--! of a value the script computed itself. Work is constant.
local key = KEYS[1]

-- A positive integer argument below 10^15 (exact as a Lua number): nil otherwise.
local function positive(s)
  local n = s and tonumber(s)
  if n and n >= 1 and n < 1e15 and n % 1 == 0 then
    return n
  end
  return nil
end
local interval, burst, cost = positive(ARGV[1]), positive(ARGV[2]), 1
if ARGV[3] ~= '1' then
  cost = positive(ARGV[3])
end
if not interval then
  return redis.error_reply('REDKIT_INPUT interval must be a positive integer of us')
end
if not burst then
  return redis.error_reply('REDKIT_INPUT burst must be a positive integer')
end
if not cost then
  return redis.error_reply('REDKIT_INPUT cost must be a positive integer')
end
local tau = interval * burst
if tau >= 1e15 then
  return redis.error_reply('REDKIT_INPUT interval * burst must be below 10^15 us')
end

-- The typed error for a refused command's pcall reply (nil when it was not refused).
local function refused(r, cmd)
  if type(r) == 'table' and r.err then
    if string.find(r.err, "can't run", 1, true) then
      return redis.error_reply('REDKIT_NOPERM ' .. cmd .. ' on the GCRA key')
    end
    return r
  end
  return nil
end

local t = redis.pcall('TIME')
local err = refused(t, 'TIME')
if err then
  return err
end
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local raw = redis.pcall('GET', key)
err = refused(raw, 'GET')
if err then
  return err
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

-- Cost-1 requests that fit in `room` us of bucket: floor(room / interval), exact.
local function units(room)
  if room < interval then
    return 0
  end
  local n = math.floor(room / interval)
  if n * interval > room then
    n = n - 1
  elseif (n + 1) * interval <= room then
    n = n + 1
  end
  return n
end

if cost > burst then
  return {0, units(tau - (tat - now)), 0, tat - now, now}
end
local new_tat = tat + interval * cost
if new_tat - now > tau then
  -- Does not conform: it would at (new_tat - tau). Nothing written.
  return {0, units(tau - (tat - now)), new_tat - tau - now, tat - now, now}
end
local full = new_tat - now
err = refused(redis.pcall('SET', key, string.format('%.0f', new_tat), 'PX',
  string.format('%.0f', math.floor((full + 999) / 1000))), 'SET')
if err then
  return err
end
return {1, units(tau - full), 0, full, now}
