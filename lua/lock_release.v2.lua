--! keys: 1
--! Releases a lock by compare-and-delete. KEYS[1] = lock key.
--! ARGV[1] = the owner token returned at acquire (16 to 128 bytes).
--! Returns 1 when the key held this token and was deleted, 0 when it did not (expired or
--! taken by another owner): a stale holder never deletes the new owner's key.
--! ACL of GET and DEL is checked first: an error reply (REDKIT_NOPERM) means nothing changed.
local token = ARGV[1]
if not token or #token < 16 or #token > 128 then
  return redis.error_reply('REDKIT_INPUT token must be 16 to 128 bytes')
end
for _, c in ipairs({{'GET', KEYS[1]}, {'DEL', KEYS[1]}}) do
  if not redis.acl_check_cmd(unpack(c)) then
    return redis.error_reply('REDKIT_NOPERM ' .. c[1] .. ' is denied to this user')
  end
end
if redis.call('GET', KEYS[1]) == token then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
