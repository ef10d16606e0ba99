--! keys: 1
--! flags: no-writes
--! A semaphore's holders, read without changing them. KEYS[1] = the holders ZSET (member =
--! owner token, score = lease end in ms of server TIME). ARGV[1] = how many live holders to
--! list (1 to 10000), soonest lease end first.
--! Returns {now_ms, live, expired, token1, lease_end1, token2, lease_end2, ...}: live holders
--! (lease not ended) and expired entries not dropped yet (the next acquire drops them), then
--! the first ARGV[1] live holders with their lease ends.
--! Errors: REDKIT_INPUT for a bad count, REDKIT_NOPERM when the ACL user may not run TIME,
--! ZCOUNT or ZRANGE, WRONGTYPE as Redis says it.
--! Declared read-only: sent as EVALSHA_RO / FCALL_RO (a replica may serve it); it writes
--! nothing.
local key = KEYS[1]
local n = ARGV[1] and #ARGV[1] <= 5 and string.match(ARGV[1], '^[1-9]%d*$') and tonumber(ARGV[1])
if not n or n > 10000 then
  return redis.error_reply('REDKIT_INPUT the count must be an integer in 1..10000')
end
local nope = "can't run"
local function read(...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    if string.find(r.err, nope, 1, true) then
      return nil, redis.error_reply('REDKIT_NOPERM ' .. select(1, ...) .. ' on the semaphore')
    end
    return nil, r
  end
  return r
end
local t, e = read('TIME')
if e then return e end
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local at = string.format('%.0f', now)
local live
live, e = read('ZCOUNT', key, '(' .. at, '+inf')
if e then return e end
local expired
expired, e = read('ZCOUNT', key, '-inf', at)
if e then return e end
local first
first, e = read('ZRANGE', key, '(' .. at, '+inf', 'BYSCORE', 'LIMIT', 0, n, 'WITHSCORES')
if e then return e end
local out = {now, live, expired}
for i = 1, #first, 2 do
  out[#out + 1] = first[i]
  out[#out + 1] = math.floor(tonumber(first[i + 1]))
end
return out
