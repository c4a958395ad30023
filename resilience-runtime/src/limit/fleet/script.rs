//! The one Lua script of a lease: a replica announces itself and takes
//! tokens from the fleet's bucket, on Redis' clock, atomically.
//!
//! Keys, under the limit's prefix `P`:
//!
//! - `P:tat`: the bucket's theoretical arrival time, in microseconds of
//!   Redis' clock (`TIME`): a GCRA at the quota's rate whose tolerance is
//!   the bank. A lease of `n` tokens moves it `n` intervals on; it may run
//!   at most the bank ahead of now.
//! - `P:last`: when a replica last reached Redis. After more than two
//!   lease periods without one (a new bucket, Redis restarted or frozen),
//!   the bank restarts at one replica's share of a lease, so that the
//!   first lease after an outage does not drain what was saved up while
//!   the replicas were deciding alone.
//! - `P:replicas`: a sorted set of the replicas, each scored with the end
//!   of its announcement; their count is the divisor of the share a
//!   replica falls back to.

use std::sync::LazyLock;

use redis::Script;

/// `KEYS[1]` the prefix; `ARGV`: 1 the interval in µs (decimal), 2 the
/// bank in µs, 3 the tokens asked, 4 the replica's id, 5 how long its
/// announcement lasts in µs, 6 the lease period in µs, 7 `1` to cap the
/// grant at one replica's share of a lease (its first lease), 8 the keys'
/// ttl in ms, 9 the replicas the caller last heard of (a restarted Redis
/// has forgotten them; the share is never larger than among those).
///
/// Returns `{tokens granted, replicas announced, µs since a replica last
/// reached Redis}`.
pub(super) static LEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
        local p = KEYS[1]
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
        local interval = tonumber(ARGV[1])
        local bank = tonumber(ARGV[2])
        local ask = tonumber(ARGV[3])
        local period = tonumber(ARGV[6])
        local replicas = p .. ':replicas'
        redis.call('ZADD', replicas, now + tonumber(ARGV[5]), ARGV[4])
        redis.call('ZREMRANGEBYSCORE', replicas, '-inf', now)
        redis.call('PEXPIRE', replicas, ARGV[8])
        local n = redis.call('ZCARD', replicas)
        local share = math.ceil(period / interval / math.max(n, tonumber(ARGV[9])))
        local tat = tonumber(redis.call('GET', p .. ':tat') or '0')
        local last = tonumber(redis.call('GET', p .. ':last') or '0')
        local since = math.min(now - last, 1000000000)
        if now - last > 2 * period then
            tat = math.max(tat, now + bank - share * interval)
        end
        tat = math.max(tat, now)
        local free = math.floor((now + bank - tat) / interval)
        local granted = math.max(0, math.min(ask, free))
        if ARGV[7] == '1' then granted = math.min(granted, share) end
        tat = tat + granted * interval
        redis.call('SET', p .. ':tat', string.format('%.0f', math.ceil(tat)), 'PX', ARGV[8])
        redis.call('SET', p .. ':last', string.format('%.0f', now), 'PX', ARGV[8])
        return {granted, n, since}
        ",
    )
});
