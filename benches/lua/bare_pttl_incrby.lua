-- Bench variant, not shipped: measured with benches/twin-scripts.sh against seed_limiter.lua
-- (docs/benchmarks.md, "What the scripts cost alone").
-- The default window's two commands alone (PTTL, INCRBY; PEXPIRE on a new counter), no checks, no typed errors.
-- Args: 1 <key> <limit> <window ms> <cost>.
local key = KEYS[1]
local ttl = redis.call('PTTL', key)
local count = redis.call('INCRBY', key, ARGV[3])
if ttl < 0 then redis.call('PEXPIRE', key, ARGV[2]) ttl = tonumber(ARGV[2]) end
return ttl * 1000000001 + count
