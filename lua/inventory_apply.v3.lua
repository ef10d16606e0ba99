--! keys: variadic
--! Takes (decrements) or puts back (restocks) the stock of n SKUs, all or nothing, optionally
--! idempotent by request id. All keys share the store's hash tag. Expired reservations of
--! each SKU are first returned to its stock (lazy reclaim, at most 16 per SKU and call).
--! KEYS[1..n] = SKU stock counters; KEYS[n+1..2n] = their reservation hashes;
--! KEYS[2n+1..3n] = their reservation expiry ZSETs; KEYS[3n+1] (optional) = request record.
--! ARGV[1] = 'take' | 'put', ARGV[2] = n, ARGV[3..n+2] = quantities (1..=99999999999999);
--! with a request record: ARGV[n+3] = retention in ms, ARGV[n+4] = request fingerprint.
--! Reply, an array:
--!   {'ok', s1, .., sn}       applied; s = stock of each line afterwards
--!   {'short', i, a, ...}     take refused, nothing changed; line i has only a units
--!   {'dup', original}        request id seen within the retention, nothing changed; original =
--!                            the first reply as text ('ok s1 .. sn' or 'short i a ...')
--!   {'conflict'}             request id seen for a different request: nothing changed
--!   {'unknown', i}           line i's SKU has no stock recorded: nothing changed, nothing recorded
--! The record stored under the request key is '<fingerprint> <original>'.
--! v2: every stored number is parsed strictly before the first write, every write is checked
--! with redis.acl_check_cmd first (REDKIT_NOPERM), and the reclaim is bounded (ZSET + LIMIT):
--! the script applies completely or writes nothing.
--! v3 (same contract, fewer server steps): TIME and ZRANGEBYSCORE only when the SKU's expiry
--! ZSET is not empty (ZRANGE 0 0 tells); the first write runs under redis.pcall instead of a
--! precheck (a refusal of it has written nothing), the writes after it are prechecked.
--! Errors: REDKIT_DATA when a stock is not an integer 0..=99999999999999 or a reservation is
--! malformed, REDKIT_NOPERM when the ACL user may not run one of the writes, REDKIT_INPUT for
--! bad arguments or a put that would exceed the maximum; none of them changes anything.
-- Lazy reclaim of expired reservations (the same block in every script that reads stock).
-- Strict integers (Redis's own rules, narrowed to 0..=99999999999999): '0' or a non-zero
-- digit then digits, at most 14 characters. '05', '-0', '+5', ' 5', '5.0', '1e3' are refused.
local MAX = 99999999999999
local function int(s)
  if type(s) ~= 'string' or #s > 14 then
    return nil
  end
  if s == '0' or string.match(s, '^[1-9]%d*$') then
    return tonumber(s)
  end
  return nil
end
-- A hold is '<qty> <expires_ms>', both strict integers, qty >= 1.
local function hold(v)
  local q, e = string.match(v, '^(%S+) (%S+)$')
  q, e = int(q), int(e)
  if not q or q < 1 or not e then
    return nil
  end
  return q, e
end
-- Writes are planned first, every one is checked against the caller's ACL with its real keys
-- (redis.acl_check_cmd), and only then run: a script either applies completely or not at all.
local writes = {}
local function write(role, ...)
  writes[#writes + 1] = {role = role, args = {...}}
end
-- v3: the first write is not prechecked: it runs under redis.pcall and a refusal of it
-- (nothing written yet) is the same REDKIT_NOPERM; only the writes after it are prechecked.
local function apply_writes()
  for i = 2, #writes do
    local w = writes[i]
    if not redis.acl_check_cmd(unpack(w.args)) then
      return redis.error_reply('REDKIT_NOPERM the user may not run ' .. w.args[1] .. ' on the ' .. w.role)
    end
  end
  local first = writes[1]
  if first then
    local r = redis.pcall(unpack(first.args))
    if type(r) == 'table' and r.err then
      if string.find(r.err, "can't run", 1, true) then
        return redis.error_reply('REDKIT_NOPERM the user may not run ' .. first.args[1] .. ' on the ' .. first.role)
      end
      return r
    end
  end
  for i = 2, #writes do
    redis.call(unpack(writes[i].args))
  end
  return nil
end
-- Reclaim: a reservation hash maps '<reservation id>' -> '<qty> <expires_at_ms>'; the expiry ZSET
-- scores each live id by its expiry (Redis TIME, ms). At most RECLAIM expired holds are
-- returned per SKU and call (ZRANGEBYSCORE .. LIMIT), so the work is bounded whatever the
-- number of holds. plan() reads only; reclaim() plans the writes.
local RECLAIM = 16
local clock
local function now_ms()
  if not clock then
    local t = redis.call('TIME')
    clock = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return clock
end
local function plan(rkey, zkey)
  redis.call('HLEN', rkey) -- WRONGTYPE unless a hash (or missing), before any write
  -- v3: the clock and the range are read only when the SKU holds reservations at all.
  local first = redis.call('ZRANGE', zkey, 0, 0, 'WITHSCORES')
  if #first == 0 then
    return 0, first
  end
  local ids = redis.call('ZRANGEBYSCORE', zkey, '-inf', now_ms(), 'LIMIT', 0, RECLAIM)
  if #ids == 0 then
    return 0, ids
  end
  local values = redis.call('HMGET', rkey, unpack(ids))
  local freed = 0
  for j = 1, #ids do
    if values[j] then
      local q = hold(values[j])
      if not q then
        return nil, 'REDKIT_DATA a reservation is not "<qty> <expires_ms>"'
      end
      freed = freed + q
    end
  end
  return freed, ids
end
local function reclaim(rkey, zkey, skey, freed, ids)
  if #ids == 0 then
    return
  end
  write('reservation hash', 'HDEL', rkey, unpack(ids))
  write('reservation expiries', 'ZREM', zkey, unpack(ids))
  if freed > 0 then
    write('stock', 'INCRBY', skey, freed)
  end
end
-- End of the reclaim block.

local mode = ARGV[1]
if mode ~= 'take' and mode ~= 'put' then
  return redis.error_reply("REDKIT_INPUT mode must be 'take' or 'put'")
end
local n = int(ARGV[2])
if not n or n < 1 or (#KEYS ~= 3 * n and #KEYS ~= 3 * n + 1) then
  return redis.error_reply('REDKIT_INPUT line count does not match the keys')
end
local quantities = {}
for i = 1, n do
  local q = int(ARGV[i + 2])
  if not q or q < 1 then
    return redis.error_reply('REDKIT_INPUT quantity of line ' .. i .. ' must be 1..=99999999999999')
  end
  quantities[i] = q
end

local record_key = KEYS[3 * n + 1]
local retention, fingerprint
if record_key then
  retention = ARGV[n + 3]
  fingerprint = ARGV[n + 4]
  if not int(retention) or int(retention) < 1 or not fingerprint or fingerprint == '' then
    return redis.error_reply('REDKIT_INPUT a request record needs a retention and a fingerprint')
  end
  local record = redis.call('GET', record_key)
  if record then
    local head = fingerprint .. ' '
    if string.sub(record, 1, #head) == head then
      return {'dup', string.sub(record, #head + 1)}
    end
    return {'conflict'}
  end
end

-- Read and check every line (and its expired reservations) before planning any write.
local stocks = {}
for i = 1, n do
  local raw = redis.call('GET', KEYS[i])
  if not raw then
    return {'unknown', i}
  end
  stocks[i] = int(raw)
  if not stocks[i] then
    return redis.error_reply('REDKIT_DATA stock of line ' .. i .. ' is not an integer 0..=99999999999999')
  end
end
for i = 1, n do
  local freed, ids = plan(KEYS[n + i], KEYS[2 * n + i])
  if not freed then
    return redis.error_reply(ids)
  end
  if stocks[i] + freed > MAX then
    return redis.error_reply('REDKIT_DATA stock of line ' .. i .. ' plus expired reservations exceeds 99999999999999')
  end
  reclaim(KEYS[n + i], KEYS[2 * n + i], KEYS[i], freed, ids)
  stocks[i] = stocks[i] + freed
end
local applied = {'ok'}
local short = {'short'}
for i = 1, n do
  local stock = stocks[i]
  if mode == 'take' then
    if stock < quantities[i] then
      short[#short + 1] = i
      short[#short + 1] = stock
    end
    applied[i + 1] = stock - quantities[i]
  else
    applied[i + 1] = stock + quantities[i]
    if applied[i + 1] > MAX then
      return redis.error_reply('REDKIT_INPUT restock of line ' .. i .. ' would exceed 99999999999999')
    end
  end
end

local reply
if #short > 1 then
  reply = short
else
  local command = 'INCRBY'
  if mode == 'take' then
    command = 'DECRBY'
  end
  for i = 1, n do
    write('stock', command, KEYS[i], ARGV[i + 2])
  end
  reply = applied
end
if record_key then
  write('request record', 'SET', record_key, fingerprint .. ' ' .. table.concat(reply, ' '), 'PX', retention)
end
local denied = apply_writes()
if denied then
  return denied
end
return reply
