--! keys: 2
--! Acquires a lock, idempotently for its owner token.
--! KEYS[1] = lock key, KEYS[2] = fence key of the same resource (same hash slot): the
--! last fencing token issued, with an expiry. ARGV[1] = owner token (16 to 128 bytes),
--! ARGV[2] = ttl in ms, ARGV[3] = fence key ttl in ms (integers, 1 <= ttl <= fence ttl < 10^15).
--! Returns {1, fencing_token} when acquired: the lock was free (SET NX PX, then the fence key
--! is set to max(stored + 1, server TIME in microseconds) with the fence ttl), or it already
--! held this very token, marked by a blocked acquirer (lock_mark) or not (a retry after a
--! lost reply: both TTLs are refreshed, the value kept, and the stored token is answered
--! again).
--! Returns {0, pttl_ms} when another owner holds it (pttl -1: the holder's key has no TTL).
--! Nothing is half-applied: the input and the stored fence (Redis integer rules, below 2^53)
--! are checked and the next token computed before the first write; the reads (GET, TIME) run
--! before it; `SET lock token NX PX ttl GET` takes a free lock and reads the holder in one
--! step (it writes only when the lock was free) and runs under redis.pcall, so an ACL or type
--! refusal writes nothing; every command that can run after it is checked with
--! redis.acl_check_cmd first (SET of the fence key always; PEXPIRE only on a retry).
--! A refusal is REDKIT_NOPERM (ACL) or a WRONGTYPE error; REDKIT_DATA for a bad fence.
local lock, fence = KEYS[1], KEYS[2]
local token, ttl_arg, fence_ttl_arg = ARGV[1], ARGV[2], ARGV[3]
local function ms(s)
  return s and #s <= 15 and string.match(s, '^[1-9]%d*$') and tonumber(s)
end
if not token or #token < 16 or #token > 128 then
  return redis.error_reply('REDKIT_INPUT token must be 16 to 128 bytes')
end
local ttl, fence_ttl = ms(ttl_arg), ms(fence_ttl_arg)
if not ttl then
  return redis.error_reply('REDKIT_INPUT ttl must be a positive integer of ms')
end
if not fence_ttl or fence_ttl < ttl then
  return redis.error_reply('REDKIT_INPUT fence ttl must be an integer of ms >= ttl')
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
local function denied(cmd)
  return redis.error_reply('REDKIT_NOPERM ' .. cmd .. ' is denied to this user')
end
-- Largest token a Lua number holds exactly (2^53 - 1).
local MAX_FENCE = '9007199254740991'
local stored = redis.pcall('GET', fence)
local err = refused(stored, 'GET')
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
local next_text = string.format('%.0f', next)
if not redis.acl_check_cmd('SET', fence, next_text, 'PX', fence_ttl_arg) then
  return denied('SET')
end
local holder = redis.pcall('SET', lock, token, 'NX', 'PX', ttl_arg, 'GET')
err = refused(holder, 'SET')
if err then
  return err
end
if not holder then
  -- It was free and is ours now.
  redis.call('SET', fence, next_text, 'PX', fence_ttl_arg)
  return {1, next}
end
if holder ~= token and holder ~= token .. '\255' then
  local pttl = redis.pcall('PTTL', lock)
  err = refused(pttl, 'PTTL')
  if err then
    return err
  end
  return {0, pttl}
end
-- A retry by the owner: refresh both leases (the first write is checked PEXPIRE of the lock).
if not redis.acl_check_cmd('PEXPIRE', lock, ttl_arg) then
  return denied('PEXPIRE')
end
if stored then
  if not redis.acl_check_cmd('PEXPIRE', fence, fence_ttl_arg) then
    return denied('PEXPIRE')
  end
  redis.call('PEXPIRE', lock, ttl_arg)
  redis.call('PEXPIRE', fence, fence_ttl_arg)
  return {1, tonumber(stored)}
end
redis.call('PEXPIRE', lock, ttl_arg)
redis.call('SET', fence, next_text, 'PX', fence_ttl_arg)
return {1, next}
