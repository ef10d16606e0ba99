--! keys: 2
--! Issues a fencing token for a lock that is held now (a lock acquired without fencing, asked
--! for its token later). KEYS[1] = lock key, KEYS[2] = fence key of the same resource (same
--! hash slot). ARGV[1] = the owner token (16 to 128 bytes), ARGV[2] = the fence key's ttl in
--! ms (a positive integer below 10^15).
--! Returns {1, token} when the lock key holds this owner token (marked by a blocked
--! acquirer, lock_mark, or not): the fence key is set to
--! max(stored + 1, server TIME in microseconds) with the ttl, the same rule as lock_acquire,
--! so tokens issued here and at fenced acquisitions share one increasing sequence. Returns {0}
--! when the lock key is gone or holds another owner's token: nothing written (a holder whose
--! lease ran out gets no token, so a token is only ever issued within its holder's tenure).
--! Nothing is half-applied: the input, the holder and the stored fence (Redis integer rules,
--! below 2^53) are checked and the token computed before the one write, `SET fence token PX
--! ttl`, which runs under redis.pcall (an ACL refusal writes nothing: REDKIT_NOPERM).
--! REDKIT_DATA for a bad stored fence; WRONGTYPE as Redis says it.
local lock, fence = KEYS[1], KEYS[2]
local token, ttl_arg = ARGV[1], ARGV[2]
if not token or #token < 16 or #token > 128 then
  return redis.error_reply('REDKIT_INPUT token must be 16 to 128 bytes')
end
if not (ttl_arg and #ttl_arg <= 15 and string.find(ttl_arg, '^[1-9]%d*$')) then
  return redis.error_reply('REDKIT_INPUT fence ttl must be a positive integer of ms')
end
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
if holder ~= token and holder ~= token .. '\255' then
  return {0}
end
-- Largest token a Lua number holds exactly (2^53 - 1).
local MAX_FENCE = '9007199254740991'
local stored = redis.pcall('GET', fence)
err = refused(stored, 'GET')
if err then
  return err
end
if stored and stored ~= '0' and not (string.match(stored, '^[1-9]%d*$')
    and (#stored < #MAX_FENCE or (#stored == #MAX_FENCE and stored <= MAX_FENCE))) then
  return redis.error_reply('REDKIT_DATA fence key is not an integer in 0..2^53-1')
end
local t = redis.pcall('TIME')
err = refused(t, 'TIME')
if err then
  return err
end
local next = tonumber(t[1]) * 1000000 + tonumber(t[2])
if stored and tonumber(stored) + 1 > next then
  next = tonumber(stored) + 1
end
if next > tonumber(MAX_FENCE) then
  return redis.error_reply('REDKIT_DATA fence would pass 2^53-1')
end
err = refused(redis.pcall('SET', fence, string.format('%.0f', next), 'PX', ttl_arg), 'SET')
if err then
  return err
end
return {1, next}
