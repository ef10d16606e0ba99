--! keys: 1
--! Sets (initialises or overwrites) the stock of one SKU. KEYS[1] = SKU stock counter.
--! ARGV[1] = stock, an integer 0..=99999999999999.
--! Returns the stock set. A key of another type is refused (WRONGTYPE) and left untouched;
--! a string that is not an integer is overwritten (setting is how stock is repaired).
local stock = ARGV[1]
if not stock or not string.match(stock, '^%d+$') or #stock > 14 then
  return redis.error_reply('REDKIT_INPUT stock must be an integer 0..=99999999999999')
end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'string' and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE the SKU key holds a ' .. kind)
end
redis.call('SET', KEYS[1], stock)
return tonumber(stock)
