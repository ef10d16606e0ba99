-- The seed limiter a user writes from the articles (INCR; EXPIRE on the first hit; compare):
-- what the lean bench's limiter rows and benches/twin-scripts.sh compare against. Not shipped.
-- Args: 1 <key> <limit> <window s>.
local c = redis.call('INCR', KEYS[1])
if c == 1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
if c > tonumber(ARGV[1]) then return 0 end
return 1
