--! keys: 1
--! flags: no-writes
--! A sliding window, read without counting. KEYS[1] = the client's window state
--! "<current>:<previous>" whose TTL is the time until the current window ends plus one
--! window. ARGV[1] = limit, ARGV[2] = window in ms; each an integer >= 1 below 10^15.
--! Returns {used, remaining, reset_after_ms}: the weighted count a check would see now
--! (previous * time left in the current window / window, rounded down, + current), the
--! cost-1 requests that would pass now, and the time until every counted unit has left the
--! window.
--! Errors: REDKIT_INPUT for bad arguments, REDKIT_DATA when the state is not two canonical
--! counters, REDKIT_NOPERM when the ACL user may not run GET or PTTL, WRONGTYPE as Redis says
--! it.
--! Declared read-only: sent as EVALSHA_RO / FCALL_RO (a replica may serve it); it writes
--! nothing.
local key = KEYS[1]
local limit = ARGV[1] and tonumber(ARGV[1])
if not (limit and limit >= 1 and limit < 1e15 and limit % 1 == 0) then
  return redis.error_reply('REDKIT_INPUT limit must be a positive integer')
end
local window = ARGV[2] and tonumber(ARGV[2])
if not (window and window >= 1 and window < 1e15 and window % 1 == 0) then
  return redis.error_reply('REDKIT_INPUT window must be a positive integer of ms')
end
local nope = "can't run"
local raw = redis.pcall('GET', key)
if type(raw) == 'table' then
  if string.find(raw.err, nope, 1, true) then
    return redis.error_reply('REDKIT_NOPERM GET on the sliding window')
  end
  return raw
end
if not raw then
  return {0, limit, 0}
end
local c, q = string.match(raw, '^(%d+):(%d+)$')
if not (c and q and #c <= 15 and #q <= 15
    and (c == '0' or string.byte(c) ~= 48) and (q == '0' or string.byte(q) ~= 48)) then
  return redis.error_reply('REDKIT_DATA sliding window state is not two counters')
end
local cur, prev = tonumber(c), tonumber(q)
local p = redis.pcall('PTTL', key)
if type(p) == 'table' then
  if string.find(p.err, nope, 1, true) then
    return redis.error_reply('REDKIT_NOPERM PTTL on the sliding window')
  end
  return p
end
if p < 0 or p > 2 * window then
  -- No usable TTL: the next check gives the state two windows (as the check reads it).
  p = 2 * window
elseif p <= window then
  -- The current window ended: it is the previous one now.
  cur, prev, p = 0, cur, p + window
end
local used = math.floor(prev * (p - window) / window) + cur
local remaining = limit - used
if remaining < 0 then
  remaining = 0
end
return {used, remaining, p}
