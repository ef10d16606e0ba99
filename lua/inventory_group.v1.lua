--! keys: variadic
--! Group commit of a hot SKU: settles m queued decrements of ONE SKU in arrival order, each
--! with its own quantity and optional request id, in one call. Each member is answered exactly
--! as inventory_apply (v4/v5) answers a one-line take, and its request record is the same
--! text, so a retry through either script answers the original outcome.
--! KEYS[1] = the SKU's stock counter, KEYS[2] = its reservation hash, KEYS[3] = its
--! reservation expiry ZSET, KEYS[4..] = request records (one per member with a request id).
--! ARGV[1] = retention of request records in ms ('0' when no member has one), ARGV[2] = m,
--! then per member j (1..m): ARGV[3j] = quantity (1..=99999999999999), ARGV[3j+1] = r, its
--! record as KEYS[3+r] (0 = no request id), ARGV[3j+2] = its request fingerprint ('' if none).
--! Reply: one array per member, in order, each a one-line inventory_apply reply:
--!   {'ok', s}        decremented; s = stock afterwards (after the members before it)
--!   {'short', 1, a}  refused, nothing changed for it; only a units were left
--!   {'dup', text}    its request id was seen (earlier, or for a member before it in this
--!                    group) for the same request; text = the original reply
--!   {'conflict'}     its request id was seen for a different request
--!   {'unknown', 1}   the SKU has no stock recorded (nothing written for anyone)
--! Expired reservations are first returned to the stock (at most 16 per call), as in v4.
--! Everything (arguments, the stock, reservations, records, ACL of every write) is checked
--! before the first write: an error (REDKIT_INPUT, REDKIT_DATA, REDKIT_NOPERM, WRONGTYPE)
--! changes nothing for any member. Writes: one SET PX per new record, the reclaim, and ONE
--! DECRBY of the total taken.
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
if not m or m < 1 or #ARGV ~= 2 + 3 * m then
  return redis.error_reply('REDKIT_INPUT member count does not match the arguments')
end
local records = #KEYS - 3
if records < 0 then
  return redis.error_reply('REDKIT_INPUT a group needs the stock and reservation keys')
end
local retention = ARGV[1]
if records > 0 then
  local r = int(retention)
  if not r or r < 1 then
    return redis.error_reply('REDKIT_INPUT a request record needs a retention')
  end
end
local quantities, slots = {}, {}
for j = 1, m do
  local q = int(ARGV[3 * j])
  if not q or q < 1 then
    return redis.error_reply('REDKIT_INPUT quantity of member ' .. j .. ' must be 1..=99999999999999')
  end
  local r = int(ARGV[3 * j + 1])
  if not r or r > records or (r > 0 and ARGV[3 * j + 2] == '') then
    return redis.error_reply('REDKIT_INPUT record of member ' .. j .. ' is not a record key with a fingerprint')
  end
  quantities[j], slots[j] = q, r
end

-- The answer for a record found under a member's request key.
local function answer(record, head)
  if string.sub(record, 1, #head) == head then
    return {'dup', string.sub(record, #head + 1)}
  end
  return {'conflict'}
end

local raw = redis.pcall('GET', KEYS[1])
if type(raw) == 'table' then
  return raw
end
if not raw then
  -- Nothing is written: a member whose request id was recorded still answers its original.
  local replies = {}
  for j = 1, m do
    replies[j] = {'unknown', 1}
    if slots[j] > 0 then
      local record = redis.call('GET', KEYS[3 + slots[j]])
      if record then
        replies[j] = answer(record, ARGV[3 * j + 2] .. ' ')
      end
    end
  end
  return replies
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

-- Settle the members in order on the running stock; records written in this group count.
local replies, seen, taken = {}, {}, 0
for j = 1, m do
  local key, head
  local found
  if slots[j] > 0 then
    key, head = KEYS[3 + slots[j]], ARGV[3 * j + 2] .. ' '
    found = seen[key]
    if not found then
      found = redis.call('GET', key)
    end
  end
  if found then
    replies[j] = answer(found, head)
  else
    local q = quantities[j]
    local text
    if stock < q then
      replies[j] = {'short', 1, stock}
      text = 'short 1 ' .. stock
    else
      stock = stock - q
      taken = taken + q
      replies[j] = {'ok', stock}
      text = 'ok ' .. stock
    end
    if key then
      seen[key] = head .. text
      writes[#writes + 1] = {'request record', 'SET', key, seen[key], 'PX', retention}
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
return replies
