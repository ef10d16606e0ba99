--! keys: 3
--! Reads the stock of one SKU, first returning expired reservations to it (at most 16 per
--! call). KEYS[1] = SKU stock counter, KEYS[2] = the SKU's reservation hash, KEYS[3] = its
--! reservation expiry ZSET. No ARGV.
--! Returns the stock (integer), or nil when the SKU has no stock recorded.
--! Strict parsing, ACL checks of the reclaim's writes before the first one, bounded work.
--! A value that is not an integer 0..=99999999999999 is refused (REDKIT_DATA), as is a
--! malformed reservation; REDKIT_NOPERM when the user may not run the reclaim's writes;
--! none of them changes anything.
--! The reclaim block is marked `--! shared: reclaim` (in a Functions library it is
--! one function that every script carrying the block calls).
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

local raw = redis.call('GET', KEYS[1])
if not raw then
  return nil
end
local stock = int(raw)
if not stock then
  return redis.error_reply('REDKIT_DATA stock of line 1 is not an integer 0..=99999999999999')
end
local freed, ids = plan(KEYS[2], KEYS[3])
if not freed then
  return redis.error_reply(ids)
end
stock = stock + freed
if stock > MAX then
  return redis.error_reply('REDKIT_DATA stock plus expired reservations exceeds 99999999999999')
end
reclaim(KEYS[2], KEYS[3], KEYS[1], freed, ids)
local denied = apply_writes()
if denied then
  return denied
end
return stock
