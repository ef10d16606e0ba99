--! keys: variadic
--! Takes (decrements) or puts back (restocks) the stock of n SKUs, all or nothing, optionally
--! idempotent by request id. All keys share the store's hash tag. Expired reservations of
--! each SKU are first returned to its stock (lazy reclaim, at most 16 per SKU and call).
--! KEYS[1..n] = SKU stock counters; KEYS[n+1..2n] = their reservation hashes;
--! KEYS[2n+1..3n] = their reservation expiry ZSETs; KEYS[3n+1] (optional) = request record.
--! ARGV[1] = 'take' | 'put', ARGV[2] = n, ARGV[3..n+2] = quantities (1..=99999999999999);
--! with a request record: ARGV[n+3] = retention in ms, ARGV[n+4] = request fingerprint.
--! Short forms of a take of 1 of one SKU, recognised by their counts alone: no ARGV at all
--! (KEYS = stock, reservation hash, expiry ZSET), or ARGV = retention, fingerprint (the same
--! keys and a request record), stand for 'take', '1', '1'[, retention, fingerprint].
--! Reply, an array:
--!   {'ok', s1, .., sn}       applied; s = stock of each line afterwards
--!   {'short', i, a, ...}     take refused, nothing changed; line i has only a units
--!   {'dup', original}        request id seen within the retention, nothing changed; original =
--!                            the first reply as text ('ok s1 .. sn' or 'short i a ...')
--!   {'conflict'}             request id seen for a different request: nothing changed
--!   {'unknown', i}           line i's SKU has no stock recorded: nothing changed, nothing recorded
--! except that an applied take of ONE line answers the bare integer s1 (the stock afterwards)
--! instead of {'ok', s1} (the record still stores 'ok s1').
--! The record stored under the request key is '<fingerprint> <original>'.
--! Writes, on the fast path (one line, take, a SKU without holds):
--!  - EXISTS of (stock, stock, expiry ZSET) = 2 (with a request record: of (stock, stock,
--!    expiry ZSET, record) = 2, the id not seen) says the SKU exists and holds no
--!    reservations; then ONE DECRBY (Redis parses the stored stock and refuses anything but an
--!    integer, under pcall: nothing written; the quantity is a number 1..=99999999999999 to
--!    Lua and its canonical form is DECRBY's to check: any other form takes the general path,
--!    which answers REDKIT_INPUT, nothing written);
--!  - a short take or a stock outside 0..=99999999999999 is put back by the same DECRBY by
--!    -quantity before the script answers (a short take: 'short'; anything else: the general
--!    path, which reads again). The keyspace is then as the call found it, but the stock key
--!    was written twice: a WATCH on it fails, and keyspace notifications, replicas and the AOF
--!    see both DECRBYs (inside the script's MULTI/EXEC);
--!  - with a request record, ONE record write follows, `SET record '<fingerprint> <outcome>'
--!    PX retention` (a short take is recorded too). Should that SET be refused (ACL; a
--!    retention it will not parse), the take is put back and the general path answers (typed
--!    error, nothing net written).
--! Anything else (a record exists: dup or conflict; holds; unknown SKU) takes the general path
--! before any write:
--!  - one ZCARD per line tells whether the SKU holds reservations at all; only then are the
--!    hold hash (HLEN), the clock (TIME) and the expired holds (ZRANGEBYSCORE, HMGET) read;
--!  - the request record is read and written in ONE step, `SET record outcome NX PX retention
--!    GET`, the first write, under redis.pcall: it writes only when no record exists (and then
--!    the stock writes follow) and otherwise answers the stored record (dup / conflict,
--!    nothing written). On the rare paths that answer without writing (unknown SKU, bad data,
--!    a restock past the maximum) the record is read first, so a retry still answers 'dup';
--!  - writes after the first are checked with redis.acl_check_cmd before the first runs.
--! Errors: REDKIT_DATA when a stock is not an integer 0..=99999999999999 or a reservation is
--! malformed, REDKIT_NOPERM when the ACL user may not run one of the writes, REDKIT_INPUT for
--! bad arguments or a put that would exceed the maximum; none of them changes anything.
-- Fast paths (see the header). Nothing is written before the general path is taken.
-- The quantity: a number 1..=99999999999999 to Lua; its form is DECRBY's to check ('05',
-- ' 5', '5.0', '1e3', '0x10' are refused by it before it writes, and the general path then
-- answers REDKIT_INPUT).
local nkeys, nargs = #KEYS, #ARGV
if nargs == 0 and nkeys == 3 then
  -- The short take of 1 without a record (the common decrement): as the fast path below.
  if redis.pcall('EXISTS', KEYS[1], KEYS[1], KEYS[3]) == 2 then
    local r = redis.pcall('DECRBY', KEYS[1], '1')
    if type(r) == 'number' then
      if r >= 0 and r <= 99999999999998 then
        return r
      end
      redis.call('DECRBY', KEYS[1], '-1')
      if r == -1 then
        return {'short', 1, 0}
      end
    end
  end
end
-- The short take of 1 with a record (see the header), read as 'take', '1', '1' here and on the
-- general path.
local short_form = (nargs == 0 and nkeys == 3) or (nargs == 2 and nkeys == 4)
local a1, a2, a3 = ARGV[1], ARGV[2], ARGV[3]
if nkeys == 4 and short_form then
  a1, a2, a3 = 'take', '1', '1'
end
if (nkeys == 3 or nkeys == 4) and a2 == '1' and a1 == 'take' then
  local qarg = a3
  -- A quantity of "1" (the common take) needs no conversion: Lua interns strings, so the
  -- comparison is one pointer test.
  local q = 1
  if qarg ~= '1' then
    q = tonumber(qarg)
  end
  if q and q >= 1 and q <= 99999999999999 and q % 1 == 0 then
    if nkeys == 3 then
      -- EXISTS counts a key once per mention: 2 = the stock exists and no expiry ZSET (no
      -- holds). Anything else (holds, no stock, EXISTS refused) takes the general path.
      if redis.pcall('EXISTS', KEYS[1], KEYS[1], KEYS[3]) == 2 then
        local r = redis.pcall('DECRBY', KEYS[1], qarg)
        if type(r) == 'number' then
          if r >= 0 and r <= 99999999999999 - q then
            return r
          end
          -- Short, or a stock outside 0..=MAX: put back exactly what DECRBY took (the same
          -- command on the same key: allowed, and never refused for memory once the script
          -- has written). The stock is as it was.
          redis.call('DECRBY', KEYS[1], '-' .. qarg)
          if r < 0 and r + q >= 0 then
            return {'short', 1, r + q}
          end
        end
      end
    else
      -- With a request record: EXISTS of (stock, stock, expiry ZSET, record) = 2 says the SKU
      -- exists, holds no reservations and the request id was not seen. Then the take, then the
      -- record of its outcome; a refused record write (ACL, a retention SET will not parse)
      -- puts the take back and the general path answers.
      local ret, fp = ARGV[4], ARGV[5]
      if short_form then
        ret, fp = ARGV[1], ARGV[2]
      end
      local rt = tonumber(ret)
      if rt and rt >= 1 and rt <= 99999999999999 and rt % 1 == 0 and fp and fp ~= ''
          and redis.pcall('EXISTS', KEYS[1], KEYS[1], KEYS[3], KEYS[4]) == 2 then
        local r = redis.pcall('DECRBY', KEYS[1], qarg)
        if type(r) == 'number' then
          local took = r >= 0 and r <= 99999999999999 - q
          if not took then
            -- Short, or a stock outside 0..=MAX: put back what DECRBY took (as above).
            redis.call('DECRBY', KEYS[1], '-' .. qarg)
          end
          local outcome
          if took then
            outcome = string.format('ok %d', r)
          elseif r < 0 and r + q >= 0 then
            outcome = string.format('short 1 %d', r + q)
          end
          if outcome then
            local saved = redis.pcall('SET', KEYS[4], fp .. ' ' .. outcome, 'PX', ret)
            if type(saved) == 'table' and saved.ok then
              if took then
                return r
              end
              return {'short', 1, r + q}
            end
            if took then
              -- The record was refused: put the take back; the general path answers.
              redis.call('DECRBY', KEYS[1], '-' .. qarg)
            end
          end
        end
      end
    end
  end
end
-- Strict integers (Redis's own rules, narrowed to 0..=99999999999999): '0' or a non-zero
-- digit then digits, at most 14 characters. '05', '-0', '+5', ' 5', '5.0', '1e3' are refused.
local MAX = 99999999999999
local function int(s)
  if type(s) ~= 'string' or #s > 14 then
    return nil
  end
  if s == '0' or string.find(s, '^[1-9]%d*$') then
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
-- Planned writes, each {role, command, args...}; run by apply() below.
local writes = {}
local function denied(w)
  return redis.error_reply('REDKIT_NOPERM the user may not run ' .. w[2] .. ' on the ' .. w[1])
end
-- Reclaim of expired reservations: a reservation hash maps '<reservation id>' ->
-- '<qty> <expires_at_ms>'; the expiry ZSET scores each live id by its expiry (Redis TIME,
-- ms). At most RECLAIM expired holds are returned per SKU and call (ZRANGEBYSCORE .. LIMIT).
-- Called only when the expiry ZSET is not empty. Reads only; returns units freed and ids.
local RECLAIM = 16
local clock
local function plan(rkey, zkey)
  redis.call('HLEN', rkey) -- WRONGTYPE unless a hash (or missing), before any write
  if not clock then
    local t = redis.call('TIME')
    clock = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local ids = redis.call('ZRANGEBYSCORE', zkey, '-inf', clock, 'LIMIT', 0, RECLAIM)
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

-- The general path reads the arguments in the full form.
local ARGV = ARGV
if short_form then
  ARGV = {'take', '1', '1', ARGV[1], ARGV[2]}
end
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
local retention, head
if record_key then
  retention = ARGV[n + 3]
  local fingerprint = ARGV[n + 4]
  local r = int(retention)
  if not r or r < 1 or not fingerprint or fingerprint == '' then
    return redis.error_reply('REDKIT_INPUT a request record needs a retention and a fingerprint')
  end
  head = fingerprint .. ' '
end
-- The answer for a record found under the request key.
local function answer(record)
  if string.sub(record, 1, #head) == head then
    return {'dup', string.sub(record, #head + 1)}
  end
  return {'conflict'}
end
-- An answer that writes nothing (unknown SKU, bad data): a request id seen before wins.
local function refuse(reply)
  if record_key then
    local record = redis.call('GET', record_key)
    if record then
      return answer(record)
    end
  end
  return reply
end

-- Read and check every line (and its expired reservations) before any write.
local stocks = {}
for i = 1, n do
  local raw = redis.pcall('GET', KEYS[i])
  if type(raw) == 'table' then
    return refuse(raw)
  end
  if not raw then
    return refuse({'unknown', i})
  end
  stocks[i] = int(raw)
  if not stocks[i] then
    return refuse(redis.error_reply('REDKIT_DATA stock of line ' .. i .. ' is not an integer 0..=99999999999999'))
  end
end
local reclaims = {}
for i = 1, n do
  local rkey, zkey = KEYS[n + i], KEYS[2 * n + i]
  if redis.call('ZCARD', zkey) > 0 then
    local freed, ids = plan(rkey, zkey)
    if not freed then
      return refuse(redis.error_reply(ids))
    end
    if stocks[i] + freed > MAX then
      return refuse(redis.error_reply('REDKIT_DATA stock of line ' .. i .. ' plus expired reservations exceeds 99999999999999'))
    end
    if #ids > 0 then
      reclaims[#reclaims + 1] = {'reservation hash', 'HDEL', rkey, unpack(ids)}
      reclaims[#reclaims + 1] = {'reservation expiries', 'ZREM', zkey, unpack(ids)}
      if freed > 0 then
        reclaims[#reclaims + 1] = {'stock', 'INCRBY', KEYS[i], freed}
        stocks[i] = stocks[i] + freed
      end
    end
  end
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
      return refuse(redis.error_reply('REDKIT_INPUT restock of line ' .. i .. ' would exceed 99999999999999'))
    end
  end
end

local reply = applied
if #short > 1 then
  reply = short
end
-- Writes, in order: the request record (SET NX GET), the reclaims, the stock changes.
if record_key then
  writes[1] = {'request record', 'SET', record_key, head .. table.concat(reply, ' '), 'NX', 'PX', retention, 'GET'}
end
for _, w in ipairs(reclaims) do
  writes[#writes + 1] = w
end
if reply == applied then
  local command = 'INCRBY'
  if mode == 'take' then
    command = 'DECRBY'
  end
  for i = 1, n do
    writes[#writes + 1] = {'stock', command, KEYS[i], ARGV[i + 2]}
  end
end
for i = 2, #writes do
  if not redis.acl_check_cmd(unpack(writes[i], 2)) then
    return denied(writes[i])
  end
end
if writes[1] then
  local r = redis.pcall(unpack(writes[1], 2))
  if type(r) == 'table' and r.err then
    if string.find(r.err, "can't run", 1, true) then
      return denied(writes[1])
    end
    return r
  end
  if record_key and r then
    -- The request was seen before: SET NX wrote nothing.
    return answer(r)
  end
end
for i = 2, #writes do
  redis.call(unpack(writes[i], 2))
end
if n == 1 and mode == 'take' and reply == applied then
  return applied[2]
end
return reply
