--! keys: 4
--! flags: no-writes
--! A read-write lock, read without changing it. KEYS[1] = readers ZSET (member = owner token,
--! score = lease end in ms of server TIME), KEYS[2] = writer key (the writer's token, lease as
--! TTL), KEYS[3] = writer intent (the token of the writer waiting first, short lease as TTL),
--! KEYS[4] = fence key (last fencing token issued); one hash slot. ARGV[1] = how many readers
--! to list (1 to 10000), soonest lease end first.
--! Returns {now_ms, readers, writer, writer_pttl_ms, intent, intent_pttl_ms, fence, token1,
--! lease_end1, ...}: live readers (lease not ended), the writer and the waiting writer's
--! intent (false when none) with their leases left, the last fencing token as stored (false
--! when none), then the first ARGV[1] live readers.
--! Errors: REDKIT_INPUT for a bad count, REDKIT_NOPERM when the ACL user may not run TIME,
--! ZCOUNT, ZRANGE, GET or PTTL, WRONGTYPE as Redis says it.
--! Declared read-only: sent as EVALSHA_RO / FCALL_RO (a replica may serve it); it writes
--! nothing.
local readers, writer, intent, fence = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local n = ARGV[1] and #ARGV[1] <= 5 and string.match(ARGV[1], '^[1-9]%d*$') and tonumber(ARGV[1])
if not n or n > 10000 then
  return redis.error_reply('REDKIT_INPUT the count must be an integer in 1..10000')
end
local nope = "can't run"
local function read(...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    if string.find(r.err, nope, 1, true) then
      return nil, redis.error_reply('REDKIT_NOPERM ' .. select(1, ...) .. ' on the read-write lock')
    end
    return nil, r
  end
  return r
end
local t, e = read('TIME')
if e then return e end
local at = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local live
live, e = read('ZCOUNT', readers, '(' .. at, '+inf')
if e then return e end
local out = {tonumber(at), live}
for _, k in ipairs({writer, intent}) do
  local v
  v, e = read('GET', k)
  if e then return e end
  local p = -2
  if v then
    p, e = read('PTTL', k)
    if e then return e end
  end
  out[#out + 1] = v
  out[#out + 1] = p
end
local last
last, e = read('GET', fence)
if e then return e end
out[#out + 1] = last
local first
first, e = read('ZRANGE', readers, '(' .. at, '+inf', 'BYSCORE', 'LIMIT', 0, n, 'WITHSCORES')
if e then return e end
for i = 1, #first, 2 do
  out[#out + 1] = first[i]
  out[#out + 1] = math.floor(tonumber(first[i + 1]))
end
return out
