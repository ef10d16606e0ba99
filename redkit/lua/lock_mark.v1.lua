--! keys: 1
--! Marks a held lock as waited for, so that its release wakes a blocked acquirer
--! (lock_release_wake). KEYS[1] = lock key. No arguments.
--! The lock key holds its owner's token (16 to 128 bytes of text); marked, the same token
--! followed by the byte 0xFF (which text never holds), with the same TTL (SET ... KEEPTTL XX).
--! Returns the lock key's PTTL in ms: -2 when the lock is free (nothing written), -1 when the
--! key has no TTL. A value already marked, or of another length than a token's, is left as it
--! is.
--! Both reads (GET, PTTL) run before the one write, which runs under redis.pcall:
--! REDKIT_NOPERM for an ACL refusal and WRONGTYPE as Redis says it, nothing changed then.
local lock = KEYS[1]
-- The typed error for a refused command's pcall reply (nil when it was not refused).
local function refused(r, cmd)
  if type(r) == 'table' and r.err then
    if string.find(r.err, "can't run", 1, true) then
      return redis.error_reply('REDKIT_NOPERM ' .. cmd .. ' is denied to this user')
    end
    return r
  end
  return nil
end
local holder = redis.pcall('GET', lock)
local err = refused(holder, 'GET')
if err then
  return err
end
if not holder then
  return -2
end
local pttl = redis.pcall('PTTL', lock)
err = refused(pttl, 'PTTL')
if err then
  return err
end
if #holder >= 16 and #holder <= 128 and string.byte(holder, -1) ~= 255 then
  err = refused(redis.pcall('SET', lock, holder .. '\255', 'KEEPTTL', 'XX'), 'SET')
  if err then
    return err
  end
end
return pttl
