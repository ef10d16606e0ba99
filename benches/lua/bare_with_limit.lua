-- Bench variant, not shipped: measured with benches/twin-scripts.sh against seed_limiter.lua
-- (docs/benchmarks.md, "What the scripts cost alone").
-- bare_pttl_incrby.lua converting the limit with tonumber and comparing, as the seed does.
-- Args: 1 <key> <limit> <window ms> <cost>.
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local ttl = redis.call('PTTL', key)
local count = redis.call('INCRBY', key, ARGV[3])
if ttl < 0 then redis.call('PEXPIRE', key, ARGV[2]) ttl = tonumber(ARGV[2]) end
if count > limit then return -1 end
return ttl * (limit + 1) + count
