--! keys: 1
--! Sliding window (two-counter weighted approximation), v2: v1's steps, reply and errors,
--! with the arguments each converted once with tonumber and checked as a number (v1 matched
--! each against a pattern first), the cost only when it is not "1". KEYS[1] = the client's
--! window state: "<current>:<previous>" (two canonical decimal counters) whose TTL is the time
--! until the current window ends plus one window. ARGV[1] = limit, ARGV[2] = window in ms,
--! ARGV[3] = cost; each an integer >= 1 below 10^15 in any form Lua's tonumber reads as that
--! number (none of them is written as given: what the script writes it formats itself).
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
--! Nothing is half-applied: reads (GET, PTTL) first, the state parsed strictly, then ONE
--! write (SET with a value the script computed, PX or KEEPTTL; or PEXPIRE). Constant work.
local key = KEYS[1]

-- A positive integer argument below 10^15 (exact as a Lua number): nil otherwise.
local function positive(s)
  local n = s and tonumber(s)
  if n and n >= 1 and n < 1e15 and n % 1 == 0 then
    return n
  end
  return nil
end
local limit, window, cost = positive(ARGV[1]), positive(ARGV[2]), 1
if ARGV[3] ~= '1' then
  cost = positive(ARGV[3])
end
if not limit then
  return redis.error_reply('REDKIT_INPUT limit must be a positive integer')
end
if not window then
  return redis.error_reply('REDKIT_INPUT window must be a positive integer of ms')
end
if not cost then
  return redis.error_reply('REDKIT_INPUT cost must be a positive integer')
end

-- The typed error for a refused command's pcall reply (nil when it was not refused).
local function refused(r, cmd)
  if type(r) == 'table' and r.err then
    if string.find(r.err, "can't run", 1, true) then
      return redis.error_reply('REDKIT_NOPERM ' .. cmd .. ' on the sliding window')
    end
    return r
  end
  return nil
end

-- A canonical non-negative counter below 10^15 (Redis's integer rules, exact in Lua).
local function counter(s)
  if s == '0' or (#s <= 15 and string.match(s, '^[1-9]%d*$')) then
    return tonumber(s)
  end
  return nil
end

local raw = redis.pcall('GET', key)
local err = refused(raw, 'GET')
if err then
  return err
end
local cur, prev, p = 0, 0, 2 * window
-- keep: the key's TTL is still right (same window); heal: the key has no usable TTL (none,
-- or longer than two windows), the write sets one.
local keep, heal = false, false
if raw then
  local c, q = string.match(raw, '^(%d+):(%d+)$')
  cur, prev = c and counter(c), q and counter(q)
  if not (cur and prev) then
    return redis.error_reply('REDKIT_DATA sliding window state is not two counters')
  end
  p = redis.pcall('PTTL', key)
  err = refused(p, 'PTTL')
  if err then
    return err
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
local ttl = string.format('%.0f', p)

if cost <= limit and weighted + cur + cost <= limit then
  local state = string.format('%.0f:%.0f', cur + cost, prev)
  if keep then
    err = refused(redis.pcall('SET', key, state, 'KEEPTTL'), 'SET')
  else
    err = refused(redis.pcall('SET', key, state, 'PX', ttl), 'SET')
  end
  if err then
    return err
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
  err = refused(redis.pcall('PEXPIRE', key, ttl), 'PEXPIRE')
  if err then
    return err
  end
end
return {0, remaining, retry, p}
