--! keys: variadic
--! Group commit of a hot SKU: settles m queued decrements of ONE SKU in arrival order, each
--! with its own quantity and optional request id, in one call; the caller replays the same
--! settlement to answer each member.
--! KEYS[1] = the SKU's stock counter, KEYS[2] = its reservation hash, KEYS[3] = its
--! reservation expiry ZSET, KEYS[4..] = request records, one per member with a request id.
--! ARGV[1] = retention of request records in ms ('0' when there are none), ARGV[2] = m,
--! ARGV[3..m+2] = quantities (1..=99999999999999), then per record key k (KEYS[3+k]) two
--! arguments: the member it belongs to (1..m, increasing) and its request fingerprint.
--! A group without request records may leave the quantities out: with no record keys and
--! only ARGV[1] ('0') and ARGV[2] (m) sent, each of the m members (1..=1024, GroupCommit's
--! largest batch) asks for 1.
--! Members are settled in order on the running stock: a member whose record is found (or was
--! written for a member before it in this call) takes nothing; otherwise it takes its
--! quantity if the stock covers it ('ok <stock after>') or nothing ('short 1 <stock>'), and
--! a member with a record gets '<fingerprint> <that text>' written under it (SET PX).
--! Reply:
--!   {'group', s, f1, .., fr}   s = the stock before the first member (after the reclaim),
--!                              fk = the text found under record k before this call, or 0
--!   {'unknown', f1, .., fr}    the SKU has no stock recorded: nothing written
--! Expired reservations are first returned to the stock (at most 16 per call), as
--! inventory_apply does.
--! Fast path, for a group without request records: when ARGV[1] is '0', no record keys are
--! given, ARGV[2] reads (tonumber) as the number m of quantities that follow, every quantity
--! is a canonical decimal integer (the string '1', or checked against '^[1-9]%d*$' when it is
--! not) and their total is at most 99999999999999, and EXISTS of (stock, stock, expiry ZSET)
--! = 2 says the SKU exists and holds no reservations, ONE DECRBY takes the total (Redis
--! parses the stored stock and refuses anything but an integer before it writes, under
--! pcall: nothing written). When every member is served (stock after >= 0, stock before
--! <= 99999999999999) the reply is {'group', stock before}. When some member is short, the
--! members are settled in order on the stock before, and the same DECRBY by a negative
--! amount puts back exactly what was not taken, then the same reply: the stock ends as the
--! general path leaves it, but the stock key was written twice (a WATCH on it fails;
--! keyspace notifications, replicas and the AOF see both DECRBYs, inside the script's
--! MULTI/EXEC), as inventory_apply's short take does. A stock outside 0..=99999999999999 is
--! put back whole. Anything else (request records, holds, an unknown SKU, a refused EXISTS or
--! DECRBY, a quantity in another form) takes the general path, which reads again and
--! answers as the contract above says (typed error, nothing written).
--! Everything (arguments, the stock, reservations, records, ACL of every write) is checked
--! before the first write: an error (REDKIT_INPUT, REDKIT_DATA, REDKIT_NOPERM, WRONGTYPE)
--! changes nothing. Writes: one SET PX per new record, the reclaim, ONE DECRBY of the total.
-- Fast path (see the header). Nothing is written before the general path is taken.
-- `ones`: the quantities were left out, each is 1.
local ones = #ARGV == 2 and #KEYS == 3
if #KEYS == 3 and ARGV[1] == '0' then
  local m = tonumber(ARGV[2])
  if m and m >= 1 and m % 1 == 0 and ((ones and m <= 1024) or #ARGV == m + 2) then
    local total = 0
    if ones then
      total = m
    else
      for j = 3, m + 2 do
        local a = ARGV[j]
        if a == '1' then
          total = total + 1
        elseif #a <= 14 and string.find(a, '^[1-9]%d*$') then
          total = total + tonumber(a)
        else
          total = nil
          break
        end
      end
    end
    if total and total <= 99999999999999
        and redis.pcall('EXISTS', KEYS[1], KEYS[1], KEYS[3]) == 2 then
      local r = redis.pcall('DECRBY', KEYS[1], total)
      if type(r) == 'number' then
        local start = r + total
        if r >= 0 and start <= 99999999999999 then
          return {'group', start}
        end
        if start >= 0 and start <= 99999999999999 then
          -- Some member is short: settle in order on the stock before, put back the rest.
          local stock = start
          if ones then
            stock = math.max(start - m, 0)
          else
            for j = 3, m + 2 do
              local q = tonumber(ARGV[j])
              if stock >= q then
                stock = stock - q
              end
            end
          end
          -- start - stock was taken; total - (start - stock) > 0 goes back (same command,
          -- same key: allowed, and never refused for memory once the script has written).
          redis.call('DECRBY', KEYS[1], start - stock - total)
          return {'group', start}
        end
        -- A stock outside 0..=99999999999999: put back everything; the general path answers.
        redis.call('DECRBY', KEYS[1], -total)
      end
    end
  end
end

-- The general path.
local MAX = 99999999999999
local m = tonumber(ARGV[2])
local records = #KEYS - 3
if not (m and m >= 1 and m % 1 == 0 and tostring(m) == ARGV[2] and m <= MAX) or records < 0
    or records > m or (#ARGV ~= 2 + m + 2 * records and not (ones and m <= 1024)) then
  return redis.error_reply('REDKIT_INPUT member and record counts do not match the arguments')
end
local retention = ARGV[1]
if records > 0 then
  local r = tonumber(retention)
  if not (r and r >= 1 and r <= MAX and r % 1 == 0 and tostring(r) == retention) then
    return redis.error_reply('REDKIT_INPUT a request record needs a retention')
  end
end
-- Quantities: tostring of a number of at most 14 digits prints exactly its digits, so
-- tostring(tonumber(s)) == s holds only for canonical integers. Each distinct string is
-- checked once (a flash sale's members mostly ask for '1').
local quantities, checked = {}, {}
for j = 1, m do
  local a = ARGV[2 + j] or '1'
  local q = checked[a]
  if not q then
    q = tonumber(a)
    if not (q and q >= 1 and q <= MAX and q % 1 == 0 and tostring(q) == a) then
      return redis.error_reply('REDKIT_INPUT quantity of member ' .. j .. ' must be 1..=99999999999999')
    end
    checked[a] = q
  end
  quantities[j] = q
end
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

-- The reclaim's writes (only when expired reservations are found), in this order.
local reclaim_ids, freed = nil, 0
-- Reclaim of expired reservations, only when the SKU holds any (one ZCARD otherwise).
if redis.call('ZCARD', KEYS[3]) > 0 then
  redis.call('HLEN', KEYS[2]) -- WRONGTYPE unless a hash (or missing), before any write
  local t = redis.call('TIME')
  local clock = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local ids = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', clock, 'LIMIT', 0, 16)
  if #ids > 0 then
    local values = redis.call('HMGET', KEYS[2], unpack(ids))
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
    reclaim_ids = ids
    stock = stock + freed
  end
end

found[2] = stock
-- Settle the members in order on the running stock; records written in this call count.
-- texts[n] is the value of the n-th record written, under KEYS[3 + written_k[n]].
local written, texts, written_k, taken = {}, {}, {}, 0
for j = 1, m do
  local k = owner[j]
  if not k then
    local q = quantities[j]
    if stock >= q then
      stock = stock - q
      taken = taken + q
    end
  else
    local key = KEYS[3 + k]
    if found[k + 2] == 0 and not written[key] then
      local q = quantities[j]
      local text
      if stock < q then
        text = ARGV[2 + m + 2 * k] .. ' short 1 ' .. stock
      else
        stock = stock - q
        taken = taken + q
        text = ARGV[2 + m + 2 * k] .. ' ok ' .. stock
      end
      written[key] = true
      texts[#texts + 1] = text
      written_k[#texts] = k
    end
  end
end

-- Every write is ACL-checked before the first one runs; the first runs under pcall (an ACL
-- denial or OOM there leaves everything unchanged).
local function denied(cmd, role)
  return redis.error_reply('REDKIT_NOPERM the user may not run ' .. cmd .. ' on the ' .. role)
end
-- The writes in order: HDEL, ZREM, INCRBY (reclaim), the records' SETs, DECRBY.
local first = true
local function run(role, ...)
  if first then
    first = false
    local r = redis.pcall(...)
    if type(r) == 'table' and r.err then
      if string.find(r.err, "can't run", 1, true) then
        return denied((...), role)
      end
      return r
    end
    return nil
  end
  redis.call(...)
  return nil
end
-- Prechecks of every write but the first (which the pcall above covers).
local n = 0
local function check(role, ...)
  n = n + 1
  if n > 1 and not redis.acl_check_cmd(...) then
    return denied((...), role)
  end
  return nil
end
local err
if reclaim_ids then
  err = check('reservation hash', 'HDEL', KEYS[2], unpack(reclaim_ids))
    or check('reservation expiries', 'ZREM', KEYS[3], unpack(reclaim_ids))
  if not err and freed > 0 then
    err = check('stock', 'INCRBY', KEYS[1], freed)
  end
  if err then
    return err
  end
end
for i = 1, #texts do
  err = check('request record', 'SET', KEYS[3 + written_k[i]], texts[i], 'PX', retention)
  if err then
    return err
  end
end
if taken > 0 then
  err = check('stock', 'DECRBY', KEYS[1], taken)
  if err then
    return err
  end
end

if reclaim_ids then
  err = run('reservation hash', 'HDEL', KEYS[2], unpack(reclaim_ids))
  if err then
    return err
  end
  run('reservation expiries', 'ZREM', KEYS[3], unpack(reclaim_ids))
  if freed > 0 then
    run('stock', 'INCRBY', KEYS[1], freed)
  end
end
for i = 1, #texts do
  err = run('request record', 'SET', KEYS[3 + written_k[i]], texts[i], 'PX', retention)
  if err then
    return err
  end
end
if taken > 0 then
  err = run('stock', 'DECRBY', KEYS[1], taken)
  if err then
    return err
  end
end
return found
