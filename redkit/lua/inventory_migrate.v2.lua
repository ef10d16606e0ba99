--! keys: 2
--! Moves reservations kept in the hash-only layout into the layout with an expiry ZSET, a
--! bounded batch per call: the hash-only layout kept holds in a hash ('<id>' ->
--! '<qty> <expires_ms>') with a '{next}' field; the ZSET layout also needs each id in the
--! expiry ZSET, or an expired hold never returns to stock.
--! KEYS[1] = the SKU's reservation hash, KEYS[2] = its reservation expiry ZSET.
--! ARGV[1] = HSCAN cursor ('0' to start), ARGV[2] = COUNT hint (1..=1000).
--! Reply: {next_cursor, moved}; next_cursor '0' when the scan is complete (then the
--! '{next}' field is dropped); moved = ids added to the ZSET by this call (ids already in it
--! keep their score: ZADD NX).
--! Every hold of the batch is parsed strictly and the writes are checked with
--! redis.acl_check_cmd before the first one: REDKIT_DATA / REDKIT_NOPERM change nothing.
local rkey, zkey = KEYS[1], KEYS[2]
local cursor, count = ARGV[1], tonumber(ARGV[2])
if type(cursor) ~= 'string' or #cursor > 20 or not (cursor == '0' or string.match(cursor, '^[1-9]%d*$')) then
  return redis.error_reply('REDKIT_INPUT the cursor must be an unsigned integer')
end
if not count or count ~= math.floor(count) or count < 1 or count > 1000 then
  return redis.error_reply('REDKIT_INPUT the count must be 1..=1000')
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
redis.call('ZCARD', zkey) -- WRONGTYPE unless a ZSET (or missing), before any write
local scan = redis.call('HSCAN', rkey, cursor, 'COUNT', count)
local nxt, items = scan[1], scan[2]
local zadd = {'ZADD', zkey, 'NX'}
local found = 0
for j = 1, #items, 2 do
  local field, value = items[j], items[j + 1]
  if field ~= '{next}' then
    local q, e = string.match(value, '^(%S+) (%S+)$')
    q, e = int(q), int(e)
    if not q or q < 1 or not e then
      return redis.error_reply('REDKIT_DATA a reservation is not "<qty> <expires_ms>"')
    end
    zadd[#zadd + 1] = e
    zadd[#zadd + 1] = field
    found = found + 1
  end
end
local writes = {}
if found > 0 then
  writes[#writes + 1] = zadd
end
if nxt == '0' then
  writes[#writes + 1] = {'HDEL', rkey, '{next}'}
end
for _, w in ipairs(writes) do
  if not redis.acl_check_cmd(unpack(w)) then
    return redis.error_reply('REDKIT_NOPERM the user may not run ' .. w[1])
  end
end
local moved = 0
for _, w in ipairs(writes) do
  local added = redis.call(unpack(w))
  if w[1] == 'ZADD' then
    moved = added
  end
end
return {nxt, moved}
