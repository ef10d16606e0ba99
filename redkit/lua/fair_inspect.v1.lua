--! keys: 3
--! flags: no-writes
--! A fair lock's queue, read without changing it. KEYS[1] = queue ZSET (member = owner token,
--! score = arrival number), KEYS[2] = leases ZSET (member = owner token, score = lease end in
--! ms of server TIME), KEYS[3] = fence key (the last arrival number issued); one hash slot.
--! ARGV[1] = how many entries to list from the head (1 to 10000).
--! Returns {now_ms, queued, fence, token1, arrival1, lease_end1, ...}: the queue's length, the
--! last arrival number issued (false when none), then the first ARGV[1] entries in queue
--! order (the head holds the lock while its lease lasts), each lease end -1 when missing.
--! Errors: REDKIT_INPUT for a bad count, REDKIT_NOPERM when the ACL user may not run TIME,
--! ZCARD, ZRANGE, ZSCORE or GET, WRONGTYPE as Redis says it.
--! Declared read-only: sent as EVALSHA_RO / FCALL_RO (a replica may serve it); it writes
--! nothing.
local queue, leases, fence = KEYS[1], KEYS[2], KEYS[3]
local n = ARGV[1] and #ARGV[1] <= 5 and string.match(ARGV[1], '^[1-9]%d*$') and tonumber(ARGV[1])
if not n or n > 10000 then
  return redis.error_reply('REDKIT_INPUT the count must be an integer in 1..10000')
end
local nope = "can't run"
local function read(...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    if string.find(r.err, nope, 1, true) then
      return nil, redis.error_reply('REDKIT_NOPERM ' .. select(1, ...) .. ' on the fair lock')
    end
    return nil, r
  end
  return r
end
local t, e = read('TIME')
if e then return e end
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local queued
queued, e = read('ZCARD', queue)
if e then return e end
local last
last, e = read('GET', fence)
if e then return e end
local first
first, e = read('ZRANGE', queue, 0, n - 1, 'WITHSCORES')
if e then return e end
local out = {now, queued, last}
for i = 1, #first, 2 do
  local lease
  lease, e = read('ZSCORE', leases, first[i])
  if e then return e end
  out[#out + 1] = first[i]
  out[#out + 1] = math.floor(tonumber(first[i + 1]))
  if lease then
    out[#out + 1] = math.floor(tonumber(lease))
  else
    out[#out + 1] = -1
  end
end
return out
