--! keys: 1
--! GCRA lease: takes up to `want` units of a client's bucket at once, so an instance can
--! answer the next checks of its key from the units it holds. The state is gcra's (same key,
--! same TAT in microseconds of the server's TIME, same TTL): the TAT moves past every granted
--! unit here, so every later check, leasing or not, finds them taken.
--! KEYS[1] = the client's TAT. ARGV[1] = burst (units a full bucket holds), ARGV[2] = emission
--! interval in us, ARGV[3] = cost (the units this call needs), ARGV[4] = want (the units it asks
--! for): canonical decimal integers 1..=2^53-1 with cost <= want <= burst and interval * burst
--! below 10^15.
--! With base = max(TAT, now), unit j (1-based) of a grant takes the slot base + j * interval and
--! conforms, as GCRA defines it, from when it is granted until base + (j - 1) * interval: the
--! instance uses unit j only until then (units 1..cost are this call's own, used now).
--! Reply {granted, used, tat, valid_us, reset_us, retry_us}: with at least `cost` units in the
--! bucket, granted = min(want, units in the bucket) and the TAT moves to base + granted *
--! interval; else granted = 0 and nothing is written. used = burst - the units left in the
--! bucket after the call, tat = the TAT after it (it only grows while the key lives: lower
--! means it was lost), valid_us = until when (after now) the first unit beyond `cost` may be
--! used (base - now + cost * interval; each next one interval later; 0 when refused),
--! reset_us = the time until the bucket is full again (the key's TTL once written), retry_us =
--! when refused, the time until `cost` units would be in the bucket (0 when granted).
--! Errors (nothing written): REDKIT_INPUT for bad arguments, REDKIT_NOPERM when the ACL user
--! may not run TIME, GET or SET, WRONGTYPE for a key of another type, REDKIT_DATA when the
--! stored TAT is not a canonical integer below 2^53. Reads first, then ONE write.
local key = KEYS[1]
local function int(s)
  local n = s and #s <= 16 and string.match(s, '^[1-9]%d*$') and tonumber(s)
  return n and n <= 9007199254740991 and n
end
local burst, interval, cost, want = int(ARGV[1]), int(ARGV[2]), int(ARGV[3]), int(ARGV[4])
if not (burst and interval and cost and want) or cost > want or want > burst
    or interval * burst >= 1e15 then
  return redis.error_reply('REDKIT_INPUT burst, interval, cost and want must be integers 1..=2^53-1 with cost <= want <= burst and interval * burst below 10^15')
end
local checks = {{'TIME'}, {'GET', key}, {'SET', key, '1', 'PX', '1'}}
for _, c in ipairs(checks) do
  if not redis.acl_check_cmd(unpack(c)) then
    return redis.error_reply('REDKIT_NOPERM ' .. c[1] .. ' on the GCRA key')
  end
end
local raw = redis.pcall('GET', key)
if type(raw) == 'table' and raw.err then
  return redis.error_reply('WRONGTYPE the GCRA key is not a string')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
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

-- Units in the bucket: floor(room / interval), exact (a TAT beyond the bucket, left by a
-- larger burst, leaves none).
local tau = interval * burst
local room, n = tau - (tat - now), 0
if room >= interval then
  n = math.floor(room / interval)
  if n * interval > room then
    n = n - 1
  elseif (n + 1) * interval <= room then
    n = n + 1
  end
end

if n >= cost then
  local take = math.min(want, n)
  local new_tat = tat + take * interval
  redis.call('SET', key, string.format('%d', new_tat), 'PX',
    string.format('%d', math.floor((new_tat - now + 999) / 1000)))
  return {take, burst - (n - take), new_tat, tat - now + cost * interval, new_tat - now, 0}
end
-- Not enough: `cost` units are in the bucket once the TAT is within tau - cost * interval.
return {0, burst - n, tat, 0, tat - now, tat + cost * interval - tau - now}
