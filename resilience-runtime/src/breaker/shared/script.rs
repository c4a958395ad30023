//! The one Lua script of a sync: a replica's deltas in, the fleet's
//! window and state out, atomically.
//!
//! Keys, under the breaker's prefix `P`:
//!
//! - `P:w:<bucket>`: a hash `c`, `f`, `s` (calls, failures, slow calls) of
//!   one bucket of the fleet's window, numbered on Redis' clock (`TIME`)
//!   so that every replica adds to the same bucket; it expires one window
//!   after its bucket.
//! - `P:state`: a hash `gen` (the fleet's openings so far) and `closed`
//!   (`0` while an opening is in effect, open or half-open).
//! - `P:open`: the generation of the opening, expiring with its cooldown:
//!   present, the fleet is open; absent while `closed = 0`, half-open.
//! - `P:probe:<gen>:<i>`, `i` in `1..=half_open`: the fleet's probe
//!   tokens of an opening, `SET NX` by the replica that takes them, with a
//!   ttl (a replica that dies holding one frees it).
//! - `P:ok:<gen>`: the probes of an opening that succeeded; at
//!   `half_open` the fleet closes and its window is emptied.

use std::sync::LazyLock;

use redis::Script;

/// `KEYS[1]` the prefix; `ARGV`: 1–3 the deltas of calls, failures and
/// slow calls, 4 the bucket width in ms, 5 the number of buckets, 6 `min`,
/// 7 `ratio`, 8 the slow-call ratio (above 1 without the rule), 9 the
/// cooldown in ms, 10 `half_open`, 11 the probe tokens' ttl in ms, 12 this
/// replica's id, 13 `1` when the replica opened on its own, 14 `1` when it
/// asks for probe tokens, 15 its probe successes not reported yet, 16 the
/// generation they belong to, 17 `1` to give back its unused tokens of
/// that generation, 18 the ttl of the state in ms.
///
/// Returns `{calls, failures, slow, gen, closed, open pttl (-2 when not
/// open), tokens taken}`.
pub(in crate::breaker) static SYNC: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
        local p = KEYS[1]
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local width = tonumber(ARGV[4])
        local n = tonumber(ARGV[5])
        local bucket = math.floor(now / width)
        local dc, df, ds = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
        if dc > 0 then
            local key = p .. ':w:' .. bucket
            redis.call('HINCRBY', key, 'c', dc)
            if df > 0 then redis.call('HINCRBY', key, 'f', df) end
            if ds > 0 then redis.call('HINCRBY', key, 's', ds) end
            redis.call('PEXPIRE', key, width * (n + 1))
        end
        local c, f, s = 0, 0, 0
        for i = 0, n - 1 do
            local v = redis.call('HMGET', p .. ':w:' .. (bucket - i), 'c', 'f', 's')
            c = c + (tonumber(v[1]) or 0)
            f = f + (tonumber(v[2]) or 0)
            s = s + (tonumber(v[3]) or 0)
        end
        local state = p .. ':state'
        local open_key = p .. ':open'
        local st = redis.call('HMGET', state, 'gen', 'closed')
        local gen = tonumber(st[1]) or 0
        local closed = tonumber(st[2]) or 1
        local half = tonumber(ARGV[10])
        local id = ARGV[12]
        local function clear_window()
            for i = 0, n - 1 do redis.call('DEL', p .. ':w:' .. (bucket - i)) end
            c, f, s = 0, 0, 0
        end
        local function open()
            gen = gen + 1
            closed = 0
            redis.call('HSET', state, 'gen', gen, 'closed', 0)
            redis.call('PEXPIRE', state, ARGV[18])
            redis.call('SET', open_key, gen, 'PX', ARGV[9])
        end
        local reported = tonumber(ARGV[16])
        -- Probe successes of the opening in effect.
        local ok = tonumber(ARGV[15])
        if ok > 0 and closed == 0 and reported == gen then
            local ok_key = p .. ':ok:' .. gen
            local total = redis.call('INCRBY', ok_key, ok)
            redis.call('PEXPIRE', ok_key, ARGV[18])
            if total >= half then
                closed = 1
                redis.call('HSET', state, 'closed', 1)
                redis.call('DEL', open_key)
                clear_window()
            end
        end
        -- Unused tokens given back.
        if ARGV[17] == '1' then
            for i = 1, half do
                local key = p .. ':probe:' .. reported .. ':' .. i
                if redis.call('GET', key) == id then redis.call('DEL', key) end
            end
        end
        if ARGV[13] == '1' then
            -- A replica opened on its own: a new opening, unless the fleet
            -- is already open (it then joins that one).
            if redis.call('EXISTS', open_key) == 0 then open() end
        elseif closed == 1 then
            local min = tonumber(ARGV[6])
            if c >= min and (f >= tonumber(ARGV[7]) * c or s >= tonumber(ARGV[8]) * c) then
                open()
            end
        end
        local pttl = redis.call('PTTL', open_key)
        local taken = 0
        if ARGV[14] == '1' and closed == 0 and pttl < 0 then
            -- Half-open fleet-wide: the tokens not succeeded, not held.
            local free = half - tonumber(redis.call('GET', p .. ':ok:' .. gen) or '0')
            for i = 1, half do
                if redis.call('EXISTS', p .. ':probe:' .. gen .. ':' .. i) == 1 then
                    free = free - 1
                end
            end
            for i = 1, half do
                if free <= 0 then break end
                local key = p .. ':probe:' .. gen .. ':' .. i
                if redis.call('SET', key, id, 'NX', 'PX', ARGV[11]) then
                    taken = taken + 1
                    free = free - 1
                end
            end
        end
        return {c, f, s, gen, closed, pttl, taken}
        ",
    )
});
