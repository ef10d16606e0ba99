--! keys: 2
--! flags: no-writes
--! A reentrant lock, read without changing it. KEYS[1] = holds hash (owner token -> hold
--! count; the lease is the key's TTL), KEYS[2] = fence key (last fencing token issued); one
--! hash slot.
--! Returns {owner, holds, pttl_ms, fence}: the owner token and its hold count (false and 0
--! when free), the lease left (-2 when free, -1 without a TTL), the last fencing token as
--! stored (false when none).
--! Errors: REDKIT_DATA when the hash holds more than one owner or a count that is not a
--! positive integer, REDKIT_NOPERM when the ACL user may not run HGETALL, PTTL or GET,
--! WRONGTYPE as Redis says it.
--! Declared read-only: sent as EVALSHA_RO / FCALL_RO (a replica may serve it); it writes
--! nothing.
local nope = "can't run"
local function read(...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    if string.find(r.err, nope, 1, true) then
      return nil, redis.error_reply('REDKIT_NOPERM ' .. select(1, ...) .. ' on the reentrant lock')
    end
    return nil, r
  end
  return r
end
local all, e = read('HGETALL', KEYS[1])
if e then return e end
if #all > 2 then
  return redis.error_reply('REDKIT_DATA the holds hash has more than one owner')
end
local owner, holds, pttl = false, 0, -2
if #all == 2 then
  owner = all[1]
  holds = #all[2] <= 15 and string.match(all[2], '^[1-9]%d*$') and tonumber(all[2])
  if not holds then
    return redis.error_reply('REDKIT_DATA the hold count is not a positive integer')
  end
  pttl, e = read('PTTL', KEYS[1])
  if e then return e end
end
local fence
fence, e = read('GET', KEYS[2])
if e then return e end
return {owner, holds, pttl, fence}
