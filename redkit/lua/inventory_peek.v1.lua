--! keys: 3
--! flags: no-writes
--! The stock of one SKU and its reservations, read without reclaiming anything. KEYS[1] = the
--! SKU's stock counter, KEYS[2] = its reservation hash ('<reservation id>' ->
--! '<qty> <expires_at_ms>'), KEYS[3] = its reservation expiry ZSET (not read: the hash holds
--! each expiry). No ARGV.
--! Returns {stock, reserved, holds, expired, expired_holds}: stock the counter (false when the
--! SKU has no stock recorded), reserved and holds the units and count of live reservations,
--! expired and expired_holds those of reservations past their expiry (Redis TIME) that a write
--! has not reclaimed yet (they return to the stock then). Work is bounded by the reservations
--! a SKU may hold (10,000).
--! Errors: REDKIT_DATA when the stock is not an integer 0..=99999999999999 or a reservation
--! is malformed, REDKIT_NOPERM when the ACL user may not run GET, HGETALL or TIME, WRONGTYPE as
--! Redis says it.
--! Declared read-only: sent as EVALSHA_RO / FCALL_RO (a replica may serve it); it writes
--! nothing.
local nope = "can't run"
local function read(...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    if string.find(r.err, nope, 1, true) then
      return nil, redis.error_reply('REDKIT_NOPERM the user may not run ' .. select(1, ...))
    end
    return nil, r
  end
  return r
end
local function int(s)
  if type(s) ~= 'string' or #s > 14 then
    return nil
  end
  if s == '0' or string.match(s, '^[1-9]%d*$') then
    return tonumber(s)
  end
  return nil
end
local raw, e = read('GET', KEYS[1])
if e then return e end
local stock = false
if raw then
  stock = int(raw)
  if not stock then
    return redis.error_reply('REDKIT_DATA the stock is not an integer 0..=99999999999999')
  end
end
local t
t, e = read('TIME')
if e then return e end
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local all
all, e = read('HGETALL', KEYS[2])
if e then return e end
local reserved, holds, expired, expired_holds = 0, 0, 0, 0
for i = 2, #all, 2 do
  local q, x = string.match(all[i], '^(%S+) (%S+)$')
  q, x = int(q), int(x)
  if not q or q < 1 or not x then
    return redis.error_reply('REDKIT_DATA a reservation is not "<qty> <expires_at_ms>"')
  end
  if x <= now then
    expired, expired_holds = expired + q, expired_holds + 1
  else
    reserved, holds = reserved + q, holds + 1
  end
end
return {stock, reserved, holds, expired, expired_holds}
