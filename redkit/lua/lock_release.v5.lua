--! keys: 1
--! Releases a lock by compare-and-delete.
--! KEYS[1] = lock key. ARGV[1] = the owner token returned at acquire (16 to 128 bytes).
--! Returns 1 when the key held this token and was deleted, 0 when it did not (expired or
--! taken by another owner): a stale holder never deletes the new owner's key.
--! DEL is the only write and runs last, under redis.pcall: an ACL refusal of GET or DEL is a
--! REDKIT_NOPERM error and nothing changed.
local token = ARGV[1]
if token and #token >= 16 and #token <= 128 then
  local holder = redis.pcall('GET', KEYS[1])
  if holder == token then
    if redis.pcall('DEL', KEYS[1]) == 1 then
      return 1
    end
    -- DEL refused (ACL): nothing written; the path below answers the typed error.
  elseif type(holder) ~= 'table' then
    return 0
  end
end
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
local holder = redis.pcall('GET', KEYS[1])
local err = refused(holder, 'GET')
if err then
  return err
end
if holder == token then
  err = refused(redis.pcall('DEL', KEYS[1]), 'DEL')
  if err then
    return err
  end
  return 1
end
return 0
