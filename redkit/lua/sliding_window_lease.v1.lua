--! keys: 1
--! Sliding-window lease: takes up to `want` units of a client's current window at once, so an
--! instance can answer the next checks of its key from the units it holds. The state is
--! sliding_window's (same key, same "<current>:<previous>" counters, same TTL): the units are
--! counted in the current window here, so every estimate from then on counts them, used or not.
--! KEYS[1] = the client's window state. ARGV[1] = limit, ARGV[2] = window in ms, ARGV[3] = cost
--! (the units this call needs), ARGV[4] = want (the units it asks for): canonical decimal
--! integers, limit, cost and want 1..=2^53-1 with cost <= want <= limit, window 1..=5*10^14-1.
--! The weighted count is floor(previous * (time left in the current window / window)) + current.
--! Reply {granted, used, current, valid_ms, reset_ms, retry_ms}: with at least `cost` units
--! left (limit - weighted count), granted = min(want, what is left), added to the current
--! counter; else granted = 0 and nothing is written (but a key found without a usable TTL is
--! given one). used = the weighted count after the call, current = the current window's
--! counter after it, valid_ms = the time left in the current window (the granted units are
--! used only within it), reset_ms = the key's TTL (until every counted unit has left),
--! retry_ms = when refused, the time until `cost` units would fit if nothing else is counted
--! (0 when granted).
--! Errors (nothing written): REDKIT_INPUT for bad arguments, REDKIT_NOPERM when the ACL user
--! may not run one of GET, PTTL, SET, PEXPIRE on the key, WRONGTYPE for a key of another type,
--! REDKIT_DATA when the state is not two canonical counters. Reads first, then ONE write.
local key = KEYS[1]
local function int(s)
  local n = s and #s <= 16 and string.match(s, '^[1-9]%d*$') and tonumber(s)
  return n and n <= 9007199254740991 and n
end
local limit, window, cost, want = int(ARGV[1]), int(ARGV[2]), int(ARGV[3]), int(ARGV[4])
if not (limit and window and cost and want) or window >= 5e14 or cost > want or want > limit then
  return redis.error_reply('REDKIT_INPUT limit, cost and want must be integers 1..=2^53-1 with cost <= want <= limit, window 1..=5*10^14-1 ms')
end
local checks = {
  {'GET', key}, {'PTTL', key}, {'SET', key, '1:0', 'PX', '1'}, {'SET', key, '1:0', 'KEEPTTL'},
  {'PEXPIRE', key, '1'},
}
for _, c in ipairs(checks) do
  if not redis.acl_check_cmd(unpack(c)) then
    return redis.error_reply('REDKIT_NOPERM ' .. c[1] .. ' on the sliding window')
  end
end
local raw = redis.pcall('GET', key)
if type(raw) == 'table' and raw.err then
  return redis.error_reply('WRONGTYPE the sliding window is not a string')
end
local cur, prev, p = 0, 0, 2 * window
-- keep: the key's TTL is still right (same window); heal: the key has no usable TTL (none,
-- or longer than two windows), the write sets one.
local keep, heal = false, false
if raw then
  -- Two canonical counters below 10^15: digits, no leading zero but '0' itself.
  local c, q = string.match(raw, '^(%d+):(%d+)$')
  if not (c and q and #c <= 15 and #q <= 15
      and (c == '0' or string.byte(c) ~= 48) and (q == '0' or string.byte(q) ~= 48)) then
    return redis.error_reply('REDKIT_DATA sliding window state is not two counters')
  end
  cur, prev = tonumber(c), tonumber(q)
  p = redis.call('PTTL', key)
  if p < 0 or p > 2 * window then
    p, heal = 2 * window, true
  elseif p <= window then
    -- The current window ended: it becomes the previous one.
    cur, prev, p = 0, cur, p + window
  else
    keep = true
  end
end

-- Time left in the current window, and the previous window's weighted count.
local left = p - window
local weighted = math.floor(prev * left / window)
local room = limit - weighted - cur

if room >= cost then
  local take = math.min(want, room)
  local state = string.format('%d:%d', cur + take, prev)
  if keep then
    redis.call('SET', key, state, 'KEEPTTL')
  else
    redis.call('SET', key, state, 'PX', string.format('%d', p))
  end
  return {take, weighted + cur + take, cur + take, left, p, 0}
end

-- Earliest wait w (ms) with floor(prev * (left - w) / window) + cur + cost <= limit in this
-- window, or else in the next one (where cur becomes the previous window).
local retry
if limit - cur - cost >= 0 then
  -- prev * l < (limit - cur - cost + 1) * window for the largest integer l = left - w.
  local l = math.ceil((limit - cur - cost + 1) * window / prev) - 1
  retry = left - l
else
  local l = math.ceil((limit - cost + 1) * window / cur) - 1
  if l > window then
    l = window
  end
  retry = left + window - l
end
if heal then
  redis.call('PEXPIRE', key, string.format('%d', p))
end
return {0, weighted + cur, cur, left, p, retry}
