--! keys: variadic
--! Takes (decrements) or puts back (restocks) the stock of n SKUs, all or nothing, optionally
--! idempotent by request id. All keys share the store's hash tag. Expired reservations of
--! each SKU are first returned to its stock (lazy reclaim), so a take sees them.
--! KEYS[1..n] = SKU stock counters; KEYS[n+1..2n] = their reservation hashes;
--! KEYS[2n+1] (optional) = request record.
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
--! Errors: REDKIT_DATA when a stock is not an integer 0..=99999999999999 or a reservation is
--! malformed (nothing changed),
--! REDKIT_INPUT for bad arguments or a put that would exceed that maximum.
local MAX = 99999999999999
local function integer(s)
  return s and #s <= 14 and string.match(s, '^%d+$')
end
-- Lazy reclaim of expired reservations (the same block in every script that reads stock).
-- A reservation hash maps '<reservation id>' -> '<qty> <expires_at_ms>'; the field '{next}'
-- (never an escaped id) holds a lower bound of the earliest expiry, so a hash with nothing
-- expired costs one HGET. plan() reads only; commit() writes.
-- The server clock, read at most once per call and only when it is needed.
local clock
local function now_ms()
  if not clock then
    local t = redis.call('TIME')
    clock = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return clock
end
local function plan(rkey)
  local nxt = redis.call('HGET', rkey, '{next}')
  if not nxt then
    return 0, nil
  end
  local now = now_ms()
  if now < (tonumber(nxt) or 0) then
    return 0, nil
  end
  local all = redis.call('HGETALL', rkey)
  local freed, dead, soonest = 0, {}, nil
  for j = 1, #all, 2 do
    local field = all[j]
    if field ~= '{next}' then
      local q, e = string.match(all[j + 1], '^(%d+) (%d+)$')
      if not q then
        return nil, 'REDKIT_DATA reservation ' .. field .. ' is not "<qty> <expires_ms>"'
      end
      q, e = tonumber(q), tonumber(e)
      if e <= now then
        freed = freed + q
        dead[#dead + 1] = field
      elseif not soonest or e < soonest then
        soonest = e
      end
    end
  end
  return freed, {dead = dead, soonest = soonest}
end
local function commit(rkey, skey, freed, p)
  if not p then
    return
  end
  if p.soonest then
    for j = 1, #p.dead, 500 do
      redis.call('HDEL', rkey, unpack(p.dead, j, math.min(j + 499, #p.dead)))
    end
    redis.call('HSET', rkey, '{next}', p.soonest)
  else
    redis.call('DEL', rkey)
  end
  if freed > 0 then
    redis.call('INCRBY', skey, freed)
  end
end
-- End of the reclaim block.

local mode = ARGV[1]
if mode ~= 'take' and mode ~= 'put' then
  return redis.error_reply("REDKIT_INPUT mode must be 'take' or 'put'")
end
local n = tonumber(ARGV[2])
if not integer(ARGV[2]) or n < 1 or (#KEYS ~= 2 * n and #KEYS ~= 2 * n + 1) then
  return redis.error_reply('REDKIT_INPUT line count does not match the keys')
end
local quantities = {}
for i = 1, n do
  local q = tonumber(ARGV[i + 2])
  if not integer(ARGV[i + 2]) or q < 1 then
    return redis.error_reply('REDKIT_INPUT quantity of line ' .. i .. ' must be 1..=99999999999999')
  end
  quantities[i] = q
end

local record_key = KEYS[2 * n + 1]
local retention, fingerprint
if record_key then
  retention = ARGV[n + 3]
  fingerprint = ARGV[n + 4]
  if not integer(retention) or tonumber(retention) < 1 or not fingerprint or fingerprint == '' then
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

-- Read and check every line (and its expired reservations) before writing anything.
local stocks, freed, plans = {}, {}, {}
for i = 1, n do
  local raw = redis.call('GET', KEYS[i])
  if not raw then
    return {'unknown', i}
  end
  if not integer(raw) then
    return redis.error_reply('REDKIT_DATA stock of line ' .. i .. ' is not an integer 0..=99999999999999')
  end
  stocks[i] = tonumber(raw)
end
for i = 1, n do
  local f, p = plan(KEYS[n + i])
  if not f then
    return redis.error_reply(p)
  end
  if stocks[i] + f > MAX then
    return redis.error_reply('REDKIT_DATA stock of line ' .. i .. ' plus expired reservations exceeds 99999999999999')
  end
  freed[i], plans[i] = f, p
  stocks[i] = stocks[i] + f
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

for i = 1, n do
  commit(KEYS[n + i], KEYS[i], freed[i], plans[i])
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
    redis.call(command, KEYS[i], ARGV[i + 2])
  end
  reply = applied
end
if record_key then
  redis.call('SET', record_key, fingerprint .. ' ' .. table.concat(reply, ' '), 'PX', retention)
end
return reply
