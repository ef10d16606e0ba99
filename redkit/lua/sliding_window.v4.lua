--! keys: 1
--! Sliding window (two-counter weighted approximation).
--! KEYS[1] = the client's window state: "<current>:<previous>" (two canonical decimal
--! counters) whose TTL is the time until the current window ends plus one window.
--! ARGV[1] = limit, ARGV[2] = window in ms, ARGV[3] (optional, 1 when left out) = cost; each
--! an integer >= 1 below 10^15 in any form Lua's tonumber reads as that number (none of them
--! is written as given: what the script writes it formats itself).
--! The weighted count is previous * (time left in the current window / window) (rounded
--! down) + current. A request passes when weighted count + cost <= limit; a refused request
--! changes nothing (except giving a key found without a usable TTL its window).
--! Time comes from the key's PTTL: p > window means inside the current window; 0 < p <= window
--! means the current window has ended and the next one is p ms from its end, so current
--! becomes previous; no key means no hits in the last two windows.
--! Returns {allowed (1|0), remaining, retry_after_ms, reset_after_ms}: remaining = cost-1
--! requests that would still pass now; retry_after_ms = when not allowed, time until this
--! request would pass if nothing else is counted (0 otherwise, and for a cost above the limit);
--! reset_after_ms = time until every counted unit has left the window (the key's TTL).
--! Errors (nothing written): REDKIT_INPUT for bad arguments, REDKIT_DATA when the state is not
--! two canonical counters, REDKIT_NOPERM when the ACL user may not run GET, PTTL, SET or
--! PEXPIRE on the key, WRONGTYPE as Redis says it.
--! Nothing is half-applied: reads (GET, PTTL) first, the state parsed strictly, then ONE
--! write (SET with a value the script computed, PX or KEEPTTL; or PEXPIRE). Constant work.
local key = KEYS[1]
local limit_arg, window_arg, cost_arg = ARGV[1], ARGV[2], ARGV[3]

-- Each argument a positive integer below 10^15 (exact as a Lua number); the cost converted
-- only when it is not "1".
local limit = limit_arg and tonumber(limit_arg)
if not (limit and limit >= 1 and limit < 1e15 and limit % 1 == 0) then
  return redis.error_reply('REDKIT_INPUT limit must be a positive integer')
end
local window = window_arg and tonumber(window_arg)
if not (window and window >= 1 and window < 1e15 and window % 1 == 0) then
  return redis.error_reply('REDKIT_INPUT window must be a positive integer of ms')
end
local cost = 1
if cost_arg and cost_arg ~= '1' then
  cost = tonumber(cost_arg)
  if not (cost and cost >= 1 and cost < 1e15 and cost % 1 == 0) then
    return redis.error_reply('REDKIT_INPUT cost must be a positive integer')
  end
end

-- A refused command's reply: the ACL's refusal as REDKIT_NOPERM, anything else (WRONGTYPE)
-- as Redis says it.
local nope = "can't run"

local raw = redis.pcall('GET', key)
if type(raw) == 'table' then
  if string.find(raw.err, nope, 1, true) then
    return redis.error_reply('REDKIT_NOPERM GET on the sliding window')
  end
  return raw
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
  p = redis.pcall('PTTL', key)
  if type(p) == 'table' then
    if string.find(p.err, nope, 1, true) then
      return redis.error_reply('REDKIT_NOPERM PTTL on the sliding window')
    end
    return p
  end
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

if cost <= limit and weighted + cur + cost <= limit then
  local state = string.format('%d:%d', cur + cost, prev)
  local set
  if keep then
    set = redis.pcall('SET', key, state, 'KEEPTTL')
  else
    set = redis.pcall('SET', key, state, 'PX', string.format('%d', p))
  end
  if type(set) == 'table' and set.err then
    if string.find(set.err, nope, 1, true) then
      return redis.error_reply('REDKIT_NOPERM SET on the sliding window')
    end
    return set
  end
  return {1, limit - weighted - cur - cost, 0, p}
end

local remaining = limit - weighted - cur
if remaining < 0 then
  remaining = 0
end
local retry = 0
if cost <= limit then
  -- Earliest wait w (ms) with floor(prev * (left - w) / window) + cur + cost <= limit in this
  -- window, or else in the next one (where cur becomes the previous window).
  local room = limit - cur - cost
  if room >= 0 then
    -- prev * l < (room + 1) * window for the largest integer l = left - w.
    local l = math.ceil((room + 1) * window / prev) - 1
    retry = left - l
  else
    local l = math.ceil((limit - cost + 1) * window / cur) - 1
    if l > window then
      l = window
    end
    retry = left + window - l
  end
end
if heal then
  local healed = redis.pcall('PEXPIRE', key, string.format('%d', p))
  if type(healed) == 'table' and healed.err then
    if string.find(healed.err, nope, 1, true) then
      return redis.error_reply('REDKIT_NOPERM PEXPIRE on the sliding window')
    end
    return healed
  end
end
return {0, remaining, retry, p}
