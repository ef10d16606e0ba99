--! keys: variadic
--! Group commit of a hot SKU: settles m queued decrements of ONE SKU in arrival order, each
--! with its own quantity and optional request id, in one call; the caller replays the same
--! settlement to answer each member (v2: the reply is the starting stock and the records
--! found, not one table per member; v3: v2 with no per-member text built for a member
--! without a request record, which only counts).
--! KEYS[1] = the SKU's stock counter, KEYS[2] = its reservation hash, KEYS[3] = its
--! reservation expiry ZSET, KEYS[4..] = request records, one per member with a request id.
--! ARGV[1] = retention of request records in ms ('0' when there are none), ARGV[2] = m,
--! ARGV[3..m+2] = quantities (1..=99999999999999), then per record key k (KEYS[3+k]) two
--! arguments: the member it belongs to (1..m, increasing) and its request fingerprint.
--! Members are settled in order on the running stock: a member whose record is found (or was
--! written for a member before it in this call) takes nothing; otherwise it takes its
--! quantity if the stock covers it ('ok <stock after>') or nothing ('short 1 <stock>'), and
--! a member with a record gets '<fingerprint> <that text>' written under it (SET PX).
--! Reply:
--!   {'group', s, f1, .., fr}   s = the stock before the first member (after the reclaim),
--!                              fk = the text found under record k before this call, or 0
--!   {'unknown', f1, .., fr}    the SKU has no stock recorded: nothing written
--! Expired reservations are first returned to the stock (at most 16 per call), as in v4.
--! Everything (arguments, the stock, reservations, records, ACL of every write) is checked
--! before the first write: an error (REDKIT_INPUT, REDKIT_DATA, REDKIT_NOPERM, WRONGTYPE)
--! changes nothing. Writes: one SET PX per new record, the reclaim, ONE DECRBY of the total.
local MAX = 99999999999999
-- Strict integers as in inventory_apply: '0' or a non-zero digit then digits, <= 14 chars.
local function int(s)
  if type(s) ~= 'string' or #s > 14 then
    return nil
  end
  if s == '0' or string.find(s, '^[1-9]%d*$') then
    return tonumber(s)
  end
  return nil
end

local m = int(ARGV[2])
local records = #KEYS - 3
if not m or m < 1 or records < 0 or records > m or #ARGV ~= 2 + m + 2 * records then
  return redis.error_reply('REDKIT_INPUT member and record counts do not match the arguments')
end
local retention = ARGV[1]
if records > 0 then
  local r = int(retention)
  if not r or r < 1 then
    return redis.error_reply('REDKIT_INPUT a request record needs a retention')
  end
end
-- Quantities without patterns: tostring of a number of at most 14 digits prints exactly its
-- digits, so tostring(tonumber(s)) == s holds only for canonical integers (as in v5).
local quantities = {}
for j = 1, m do
  local a = ARGV[2 + j]
  local q = tonumber(a)
  if not (q and q >= 1 and q <= MAX and q % 1 == 0 and tostring(q) == a) then
    return redis.error_reply('REDKIT_INPUT quantity of member ' .. j .. ' must be 1..=99999999999999')
  end
  quantities[j] = q
end
-- owner[j] = the record index of member j, if it has one.
local owner, last = {}, 0
for k = 1, records do
  local j = int(ARGV[1 + m + 2 * k])
  if not j or j <= last or j > m or ARGV[2 + m + 2 * k] == '' then
    return redis.error_reply('REDKIT_INPUT record ' .. k .. ' needs an increasing member and a fingerprint')
  end
  owner[j], last = k, j
end

-- What each record key holds before this call (0 when nothing), read before any write.
local found = {'group', 0}
for k = 1, records do
  found[k + 2] = redis.call('GET', KEYS[3 + k]) or 0
end
local raw = redis.pcall('GET', KEYS[1])
if type(raw) == 'table' then
  return raw
end
if not raw then
  found[1] = 'unknown'
  table.remove(found, 2)
  return found
end
local stock = int(raw)
if not stock then
  return redis.error_reply('REDKIT_DATA stock of line 1 is not an integer 0..=99999999999999')
end

-- Planned writes, each {role, command, args...}.
local writes = {}
-- Reclaim of expired reservations, only when the SKU holds any (one ZCARD otherwise).
if redis.call('ZCARD', KEYS[3]) > 0 then
  redis.call('HLEN', KEYS[2]) -- WRONGTYPE unless a hash (or missing), before any write
  local t = redis.call('TIME')
  local clock = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local ids = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', clock, 'LIMIT', 0, 16)
  if #ids > 0 then
    local values = redis.call('HMGET', KEYS[2], unpack(ids))
    local freed = 0
    for i = 1, #ids do
      if values[i] then
        local q, e = string.match(values[i], '^(%S+) (%S+)$')
        q, e = int(q), int(e)
        if not q or q < 1 or not e then
          return redis.error_reply('REDKIT_DATA a reservation is not "<qty> <expires_ms>"')
        end
        freed = freed + q
      end
    end
    if stock + freed > MAX then
      return redis.error_reply('REDKIT_DATA stock of line 1 plus expired reservations exceeds 99999999999999')
    end
    writes[#writes + 1] = {'reservation hash', 'HDEL', KEYS[2], unpack(ids)}
    writes[#writes + 1] = {'reservation expiries', 'ZREM', KEYS[3], unpack(ids)}
    if freed > 0 then
      writes[#writes + 1] = {'stock', 'INCRBY', KEYS[1], freed}
      stock = stock + freed
    end
  end
end

found[2] = stock
-- Settle the members in order on the running stock; records written in this call count.
local written, taken = {}, 0
for j = 1, m do
  local k = owner[j]
  local key = k and KEYS[3 + k]
  if not (k and (found[k + 2] ~= 0 or written[key])) then
    local q = quantities[j]
    local text
    if stock < q then
      if k then
        text = 'short 1 ' .. stock
      end
    else
      stock = stock - q
      taken = taken + q
      if k then
        text = 'ok ' .. stock
      end
    end
    if k then
      written[key] = true
      writes[#writes + 1] = {'request record', 'SET', key, ARGV[2 + m + 2 * k] .. ' ' .. text, 'PX', retention}
    end
  end
end
if taken > 0 then
  writes[#writes + 1] = {'stock', 'DECRBY', KEYS[1], taken}
end

for i = 2, #writes do
  if not redis.acl_check_cmd(unpack(writes[i], 2)) then
    return redis.error_reply('REDKIT_NOPERM the user may not run ' .. writes[i][2] .. ' on the ' .. writes[i][1])
  end
end
if writes[1] then
  -- The first write under pcall: an ACL denial or OOM here leaves everything unchanged.
  local r = redis.pcall(unpack(writes[1], 2))
  if type(r) == 'table' and r.err then
    if string.find(r.err, "can't run", 1, true) then
      return redis.error_reply('REDKIT_NOPERM the user may not run ' .. writes[1][2] .. ' on the ' .. writes[1][1])
    end
    return r
  end
end
for i = 2, #writes do
  redis.call(unpack(writes[i], 2))
end
return found
