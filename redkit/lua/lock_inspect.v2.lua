--! keys: 2
--! flags: no-writes
--! What a lock's keys hold, read without changing them. KEYS[1] = the lock key (the owner
--! token, marked with a trailing byte 0xFF once an acquirer blocks on it, lock_mark; the lease
--! as its TTL), KEYS[2] = its fence key (the last fencing token issued); one hash slot.
--! Returns {holder, pttl_ms, fence, waiting}: holder the owner token (without the mark) or
--! false when the lock is free, pttl_ms the lock key's PTTL (-2 when free, -1 without a TTL),
--! fence the last fencing token as stored or false, waiting 1 when the lock is marked, else 0.
--! Errors: REDKIT_NOPERM when the ACL user may not run GET or PTTL, WRONGTYPE as Redis says it.
--! Declared read-only: sent as EVALSHA_RO / FCALL_RO (a replica may serve it); it writes
--! nothing.
local nope = "can't run"
local function read(...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    if string.find(r.err, nope, 1, true) then
      return nil, redis.error_reply('REDKIT_NOPERM ' .. select(1, ...) .. ' on the lock')
    end
    return nil, r
  end
  return r
end
local holder, e = read('GET', KEYS[1])
if e then return e end
local pttl = -2
if holder then
  pttl, e = read('PTTL', KEYS[1])
  if e then return e end
end
local fence
fence, e = read('GET', KEYS[2])
if e then return e end
local waiting = 0
if holder and string.byte(holder, -1) == 255 then
  holder, waiting = string.sub(holder, 1, -2), 1
end
return {holder, pttl, fence, waiting}
