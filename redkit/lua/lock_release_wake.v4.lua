--! keys: 2
--! Releases a lock by compare-and-delete and wakes a blocked acquirer when one marked it.
--! KEYS[1] = lock key, KEYS[2] = its wake-up list (one hash slot). ARGV[1] = the owner token
--! returned at acquire (16 to 128 bytes of text).
--! The lock key holds the owner token; a blocked acquirer marks it (lock_mark) by appending
--! the byte 0xFF, which text never holds.
--! Returns 1 when the key held this token, marked or not, and was deleted; 0 when it did not
--! (expired or taken by another owner): a stale holder never deletes the new owner's key, nor
--! wakes anyone.
--! Unmarked, the work is GET + DEL. Marked, one entry is also pushed to the wake-up list, which
--! keeps at most one entry and expires after 60 s (bounded notifications).
--! Nothing is half-applied: every read (GET, TYPE of the list) runs before the first write; DEL
--! runs under redis.pcall; the list writes after it are checked with redis.acl_check_cmd first.
--! REDKIT_NOPERM for an ACL refusal, WRONGTYPE for a list key of another type: nothing changed
--! then.
local lock = KEYS[1]
local token = ARGV[1]
if token and #token >= 16 and #token <= 128 then
  local holder = redis.pcall('GET', lock)
  if holder == token then
    if redis.pcall('DEL', lock) == 1 then
      return 1
    end
    -- DEL refused (ACL): nothing written; the path below answers the typed error.
  elseif type(holder) ~= 'table' and holder ~= token .. '\255' then
    return 0
  end
end
local wake = KEYS[2]
if not token or #token < 16 or #token > 128 then
  return redis.error_reply('REDKIT_INPUT token must be 16 to 128 bytes')
end
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
local marked = holder == token .. '\255'
if holder ~= token and not marked then
  return 0
end
if marked then
  local kind = redis.pcall('TYPE', wake)
  err = refused(kind, 'TYPE')
  if err then
    return err
  end
  if kind.ok ~= 'list' and kind.ok ~= 'none' then
    return redis.error_reply('WRONGTYPE lock wake-up key is not a list')
  end
  local checks = {{'LPUSH', wake, '1'}, {'LTRIM', wake, '0', '0'}, {'PEXPIRE', wake, '60000'}}
  for _, c in ipairs(checks) do
    if not redis.acl_check_cmd(unpack(c)) then
      return redis.error_reply('REDKIT_NOPERM ' .. c[1] .. ' is denied to this user')
    end
  end
end
err = refused(redis.pcall('DEL', lock), 'DEL')
if err then
  return err
end
if marked then
  redis.call('LPUSH', wake, '1')
  redis.call('LTRIM', wake, '0', '0')
  redis.call('PEXPIRE', wake, '60000')
end
return 1
