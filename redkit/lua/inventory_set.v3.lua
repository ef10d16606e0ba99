--! keys: 1
--! Sets (initialises or overwrites) the stock of one SKU. KEYS[1] = SKU stock counter.
--! ARGV[1] = stock, an integer 0..=99999999999999 ('0' or no leading zero), parsed strictly.
--! Returns the stock set. A key of another type is refused (WRONGTYPE) and left untouched;
--! a string that is not an integer is overwritten (setting is how stock is repaired).
--! The SET is checked with redis.acl_check_cmd first (REDKIT_NOPERM, nothing written).
local stock = ARGV[1]
if type(stock) ~= 'string' or #stock > 14 or not (stock == '0' or string.match(stock, '^[1-9]%d*$')) then
  return redis.error_reply('REDKIT_INPUT stock must be an integer 0..=99999999999999')
end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'string' and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE the SKU key holds a ' .. kind)
end
if not redis.acl_check_cmd('SET', KEYS[1], stock) then
  return redis.error_reply('REDKIT_NOPERM the user may not run SET on the stock')
end
redis.call('SET', KEYS[1], stock)
return tonumber(stock)
