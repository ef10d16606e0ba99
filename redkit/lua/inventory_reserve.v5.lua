--! keys: 4
--! Reservations of one SKU: reserve (deduct now, hold for a TTL), commit (keep the units
--! deducted, drop the hold) or release (return the units). Expired reservations are first
--! returned to stock (lazy reclaim, at most 16 per call); time comes from Redis TIME.
--! KEYS[1] = SKU stock counter, KEYS[2] = the SKU's reservation hash
--!   (field '<reservation id>' -> '<qty> <expires_at_ms>'),
--! KEYS[3] = the reservation's settlement record ('c <qty>' committed / 'r <qty>' released,
--!   kept for the retention so a retried reserve, commit or release learns what happened),
--! KEYS[4] = the SKU's reservation expiry ZSET (member id, score expires_at_ms).
--! ARGV[1] = 'reserve' | 'commit' | 'release', ARGV[2] = reservation id (escaped, no '{');
--! reserve only: ARGV[3] = quantity (1..=99999999999999), ARGV[4] = ttl in ms
--! (1..=2592000000), ARGV[5] = most live reservations per SKU;
--! commit and release: ARGV[3] = retention of the settlement record in ms.
--! Reply, an array:
--!   reserve: {'ok', stock_left, ttl_ms} | {'short', available} | {'dup', qty, ms_left}
--!            | {'full', limit} | {'committed', qty} | {'released', qty}
--!   commit:  {'ok', qty} | {'committed', qty} | {'released', qty} | {'none'}
--!   release: {'ok', qty, stock} | {'committed', qty} | {'released', qty} | {'none'}
--! 'committed' / 'released': no live hold, but this id was settled so within the retention
--! (a retry or a redelivery); nothing changed. A settled id is never held again within the
--! retention, so a redelivered reserve + commit cannot sell twice.
--!   any:     {'unknown'} when the SKU has no stock recorded (nothing changed)
--! 'none': no live reservation and no settlement with this id (never made, or expired and
--! already returned to stock). Nothing changed beyond the reclaim.
--! Strict parsing of every stored number, ACL checks of every write before the first one,
--! bounded reclaim (ZSET + LIMIT), settled stays settled.
--! Errors: REDKIT_INPUT for bad arguments, REDKIT_DATA for a stock that is not an integer
--! or a malformed reservation or settlement, REDKIT_NOPERM when the ACL user may not run one
--! of the writes; nothing changed.
--! The reclaim block is marked `--! shared: reclaim` (in a Functions library it is
--! one function that every script carrying the block calls).
local MAX_TTL = 2592000000
--! shared: reclaim
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
-- The first write is not prechecked: it runs under redis.pcall and a refusal of it
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
  -- The clock and the range are read only when the SKU holds reservations at all.
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
--! end shared: reclaim

local op, id = ARGV[1], ARGV[2]
if op ~= 'reserve' and op ~= 'commit' and op ~= 'release' then
  return redis.error_reply("REDKIT_INPUT operation must be 'reserve', 'commit' or 'release'")
end
if not id or id == '' or #id > 1024 or string.find(id, '{', 1, true) then
  return redis.error_reply('REDKIT_INPUT reservation id must be 1..=1024 bytes without braces')
end
local qty, ttl, limit, retention
if op == 'reserve' then
  qty, ttl, limit = int(ARGV[3]), int(ARGV[4]), int(ARGV[5])
  if not qty or qty < 1 then
    return redis.error_reply('REDKIT_INPUT quantity must be 1..=99999999999999')
  end
  if not ttl or ttl < 1 or ttl > MAX_TTL then
    return redis.error_reply('REDKIT_INPUT ttl must be 1..=2592000000 ms')
  end
  if not limit or limit < 1 then
    return redis.error_reply('REDKIT_INPUT the reservation limit must be at least 1')
  end
else
  retention = int(ARGV[3])
  if not retention or retention < 1 then
    return redis.error_reply('REDKIT_INPUT the settlement retention must be at least 1 ms')
  end
end
local skey, rkey, dkey, zkey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

-- Reads and checks, no write yet.
local raw = redis.call('GET', skey)
if not raw then
  return {'unknown'}
end
local stock = int(raw)
if not stock then
  return redis.error_reply('REDKIT_DATA stock of line 1 is not an integer 0..=99999999999999')
end
local now = now_ms()
local freed, ids = plan(rkey, zkey)
if not freed then
  return redis.error_reply(ids)
end
local reclaimed = #ids -- ids taken from the expiry ZSET
local held = redis.call('HGET', rkey, id)
local held_qty, held_until
if held then
  held_qty, held_until = hold(held)
  if not held_qty then
    return redis.error_reply('REDKIT_DATA a reservation is not "<qty> <expires_ms>"')
  end
  if held_until <= now then
    -- Expired but beyond this call's reclaim batch: reclaim it now, with the batch.
    local listed = false
    for _, other in ipairs(ids) do
      if other == id then
        listed = true
      end
    end
    if not listed then
      ids[#ids + 1] = id
      freed = freed + held_qty
      if redis.call('ZSCORE', zkey, id) then
        reclaimed = reclaimed + 1
      end
    end
    held = nil
  end
end
stock = stock + freed
if stock > MAX then
  return redis.error_reply('REDKIT_DATA stock plus expired reservations exceeds 99999999999999')
end
local settled_kind, settled_qty
local settled = redis.call('GET', dkey)
if settled then
  local kind, q = string.match(settled, '^([cr]) (%S+)$')
  settled_qty = int(q)
  if not kind or not settled_qty or settled_qty < 1 then
    return redis.error_reply('REDKIT_DATA settlement record is not "c|r <qty>"')
  end
  settled_kind = kind
end
reclaim(rkey, zkey, skey, freed, ids)

local reply
if held then
  if op == 'reserve' then
    reply = {'dup', held_qty, held_until - now}
  elseif op == 'commit' then
    write('reservation hash', 'HDEL', rkey, id)
    write('reservation expiries', 'ZREM', zkey, id)
    write('settlement record', 'SET', dkey, 'c ' .. held_qty, 'PX', ARGV[3])
    reply = {'ok', held_qty}
  else
    if stock + held_qty > MAX then
      return redis.error_reply('REDKIT_DATA stock plus the released units exceeds 99999999999999')
    end
    write('reservation hash', 'HDEL', rkey, id)
    write('reservation expiries', 'ZREM', zkey, id)
    write('settlement record', 'SET', dkey, 'r ' .. held_qty, 'PX', ARGV[3])
    write('stock', 'INCRBY', skey, held_qty)
    reply = {'ok', held_qty, stock + held_qty}
  end
elseif settled_kind == 'c' then
  reply = {'committed', settled_qty}
elseif settled_kind == 'r' then
  reply = {'released', settled_qty}
elseif op ~= 'reserve' then
  reply = {'none'}
elseif stock < qty then
  reply = {'short', stock}
elseif redis.call('ZCARD', zkey) - reclaimed >= limit then
  reply = {'full', limit}
else
  local expires = now + ttl
  write('stock', 'DECRBY', skey, ARGV[3])
  write('reservation hash', 'HSET', rkey, id, qty .. ' ' .. expires)
  write('reservation expiries', 'ZADD', zkey, expires, id)
  reply = {'ok', stock - qty, ttl}
end
local denied = apply_writes()
if denied then
  return denied
end
return reply
