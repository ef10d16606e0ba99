--! keys: 2
--! Reads the stock of one SKU, first returning expired reservations to it.
--! KEYS[1] = SKU stock counter, KEYS[2] = the SKU's reservation hash. No ARGV.
--! Returns the stock (integer), or nil when the SKU has no stock recorded.
--! A value that is not an integer 0..=99999999999999 is refused (REDKIT_DATA), as is a
--! malformed reservation; neither changes anything.
local MAX = 99999999999999
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

local raw = redis.call('GET', KEYS[1])
if not raw then
  return nil
end
if not string.match(raw, '^%d+$') or #raw > 14 then
  return redis.error_reply('REDKIT_DATA stock of line 1 is not an integer 0..=99999999999999')
end
local freed, p = plan(KEYS[2])
if not freed then
  return redis.error_reply(p)
end
local stock = tonumber(raw) + freed
if stock > MAX then
  return redis.error_reply('REDKIT_DATA stock plus expired reservations exceeds 99999999999999')
end
commit(KEYS[2], KEYS[1], freed, p)
return stock
