-- go-redis/redis_rate's GCRA (`allowN`), as users copy it: float seconds, TTL in seconds. What
-- the lean bench's GCRA rows and benches/twin-scripts.sh compare redkit's against. Not shipped.
-- Args: 1 <key> <burst> <rate> <period s> <cost>.
local burst, rate, period, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local interval = period / rate
local increment = interval * cost
local burst_offset = interval * burst
local t = redis.call('TIME')
local now = (t[1] - 1483228800) + t[2] / 1000000
local tat = redis.call('GET', KEYS[1])
if not tat then tat = now else tat = tonumber(tat) end
tat = math.max(tat, now)
local new_tat = tat + increment
local diff = now - (new_tat - burst_offset)
if diff / interval < 0 then return {0, 0, tostring(-diff), tostring(tat - now)} end
local reset_after = new_tat - now
if reset_after > 0 then redis.call('SET', KEYS[1], new_tat, 'EX', math.ceil(reset_after)) end
return {cost, tostring(diff / interval), '-1', tostring(reset_after)}
