--! keys: 3
--! Reservations of one SKU: reserve (deduct now, hold for a TTL), commit (keep the units
--! deducted, drop the hold) or release (return the units). Expired reservations are first
--! returned to stock (lazy reclaim); time comes from Redis TIME.
--! KEYS[1] = SKU stock counter, KEYS[2] = the SKU's reservation hash
--!   (field '<reservation id>' -> '<qty> <expires_at_ms>', field '{next}' -> earliest expiry),
--! KEYS[3] = the reservation's settlement record ('c <qty>' committed / 'r <qty>' released,
--!   kept for the retention so a retried commit or release learns what happened).
--! ARGV[1] = 'reserve' | 'commit' | 'release', ARGV[2] = reservation id (escaped, no '{');
--! reserve only: ARGV[3] = quantity (1..=99999999999999), ARGV[4] = ttl in ms
--! (1..=2592000000), ARGV[5] = most live reservations per SKU;
--! commit and release: ARGV[3] = retention of the settlement record in ms.
--! Reply, an array:
--!   reserve: {'ok', stock_left, ttl_ms} | {'short', available} | {'dup', qty, ms_left}
--!            | {'full', limit}
--!   commit:  {'ok', qty} | {'committed', qty} | {'released', qty} | {'none'}
--!   release: {'ok', qty, stock} | {'committed', qty} | {'released', qty} | {'none'}
--! 'committed' / 'released': no live hold, but this id was settled so within the retention
--! (a retry); nothing changed.
--!   any:     {'unknown'} when the SKU has no stock recorded (nothing changed)
--! 'none': no live reservation and no settlement with this id (never made, or expired and
--! already returned to stock). Nothing changed beyond the reclaim.
--! Errors: REDKIT_INPUT for bad arguments, REDKIT_DATA for a stock that is not an integer
--! or a malformed reservation; nothing changed.
local MAX = 99999999999999
local MAX_TTL = 2592000000
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

local op, id = ARGV[1], ARGV[2]
if op ~= 'reserve' and op ~= 'commit' and op ~= 'release' then
  return redis.error_reply("REDKIT_INPUT operation must be 'reserve', 'commit' or 'release'")
end
if not id or id == '' or #id > 1024 or string.find(id, '{', 1, true) then
  return redis.error_reply('REDKIT_INPUT reservation id must be 1..=1024 bytes without braces')
end
local qty, ttl, limit
if op == 'reserve' then
  qty, ttl, limit = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
  if not integer(ARGV[3]) or qty < 1 then
    return redis.error_reply('REDKIT_INPUT quantity must be 1..=99999999999999')
  end
  if not integer(ARGV[4]) or ttl < 1 or ttl > MAX_TTL then
    return redis.error_reply('REDKIT_INPUT ttl must be 1..=2592000000 ms')
  end
  if not integer(ARGV[5]) or limit < 1 then
    return redis.error_reply('REDKIT_INPUT the reservation limit must be at least 1')
  end
else
  if not integer(ARGV[3]) or tonumber(ARGV[3]) < 1 then
    return redis.error_reply('REDKIT_INPUT the settlement retention must be at least 1 ms')
  end
end

local raw = redis.call('GET', KEYS[1])
if not raw then
  return {'unknown'}
end
if not integer(raw) then
  return redis.error_reply('REDKIT_DATA stock of line 1 is not an integer 0..=99999999999999')
end
local now = now_ms()
local freed, p = plan(KEYS[2])
if not freed then
  return redis.error_reply(p)
end
local stock = tonumber(raw) + freed
if stock > MAX then
  return redis.error_reply('REDKIT_DATA stock plus expired reservations exceeds 99999999999999')
end
local held = redis.call('HGET', KEYS[2], id)
local held_qty, held_until
if held then
  held_qty, held_until = string.match(held, '^(%d+) (%d+)$')
  if not held_qty then
    return redis.error_reply('REDKIT_DATA reservation ' .. id .. ' is not "<qty> <expires_ms>"')
  end
  held_qty, held_until = tonumber(held_qty), tonumber(held_until)
  if held_until <= now then
    held = nil -- expired: the reclaim below drops it
  end
end
if op == 'release' and held and stock + held_qty > MAX then
  return redis.error_reply('REDKIT_DATA stock plus the released units exceeds 99999999999999')
end
local settled_kind, settled_qty
if op ~= 'reserve' and not held then
  local settled = redis.call('GET', KEYS[3])
  if settled then
    settled_kind, settled_qty = string.match(settled, '^([cr]) (%d+)$')
    if not settled_kind then
      return redis.error_reply('REDKIT_DATA settlement record is not "c|r <qty>"')
    end
    settled_qty = tonumber(settled_qty)
  end
end
commit(KEYS[2], KEYS[1], freed, p)

if op == 'reserve' then
  if held then
    return {'dup', held_qty, held_until - now}
  end
  if stock < qty then
    return {'short', stock}
  end
  local live = redis.call('HLEN', KEYS[2])
  if live > 0 then
    live = live - 1 -- the '{next}' field
  end
  if live >= limit then
    return {'full', limit}
  end
  local expires = now + ttl
  redis.call('DECRBY', KEYS[1], qty)
  redis.call('DEL', KEYS[3]) -- a fresh hold under a reused id: forget the old settlement
  redis.call('HSET', KEYS[2], id, qty .. ' ' .. expires)
  local nxt = tonumber(redis.call('HGET', KEYS[2], '{next}'))
  if not nxt or expires < nxt then
    redis.call('HSET', KEYS[2], '{next}', expires)
  end
  return {'ok', stock - qty, ttl}
end

if not held then
  if settled_kind == 'c' then
    return {'committed', settled_qty}
  elseif settled_kind == 'r' then
    return {'released', settled_qty}
  end
  return {'none'}
end
redis.call('HDEL', KEYS[2], id)
if redis.call('HLEN', KEYS[2]) <= 1 then
  redis.call('DEL', KEYS[2])
end
if op == 'commit' then
  redis.call('SET', KEYS[3], 'c ' .. held_qty, 'PX', ARGV[3])
  return {'ok', held_qty}
end
redis.call('SET', KEYS[3], 'r ' .. held_qty, 'PX', ARGV[3])
redis.call('INCRBY', KEYS[1], held_qty)
return {'ok', held_qty, stock + held_qty}
