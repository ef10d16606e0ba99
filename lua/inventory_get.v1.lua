--! keys: 1
--! Reads the stock of one SKU. KEYS[1] = SKU stock counter. No ARGV.
--! Returns the stock (integer), or nil when the SKU has no stock recorded.
--! A value that is not an integer 0..=99999999999999 is refused (REDKIT_DATA).
local raw = redis.call('GET', KEYS[1])
if not raw then
  return nil
end
if not string.match(raw, '^%d+$') or #raw > 14 then
  return redis.error_reply('REDKIT_DATA stock of line 1 is not an integer 0..=99999999999999')
end
return tonumber(raw)
