//! The breaker's state machine, packed into atomic words so that the closed
//! path is a single load.

use std::fmt;

/// The state of a circuit breaker, as the [guide](crate::guide#circuit-breaker)
/// describes its three states.
///
/// The private state machine carries more (the generation of each state,
/// the probes in flight, whether an operator forced it); this is what
/// callers, hooks and metrics see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum State {
    /// Calls go through and are counted.
    Closed,
    /// The cooldown is over: a limited number of probes go through, every
    /// other call is rejected.
    HalfOpen,
    /// Every call is rejected at once, without running.
    Open,
}

impl State {
    /// The label for logs and metrics: `closed`, `half-open` or `open`.
    pub const fn as_str(self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::HalfOpen => "half-open",
            State::Open => "open",
        }
    }

    /// The value of the `circuit_breaker_state` gauge: 0 closed, 1
    /// half-open, 2 open (the guide's [metric table](crate::guide#metrics-and-alerts)).
    pub const fn as_gauge(self) -> u8 {
        match self {
            State::Closed => 0,
            State::HalfOpen => 1,
            State::Open => 2,
        }
    }

    const fn from_bits(bits: u64) -> State {
        match bits & KIND {
            CLOSED => State::Closed,
            HALF_OPEN => State::HalfOpen,
            _ => State::Open,
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// The state word: | generation (32) | unused | THREAD | NO_TICKER | PRECISE | FORCED | KIND (2) |
//
// The closed path proceeds when the low bits are all zero; the open path
// rejects when they read OPEN (with or without FORCED). PRECISE and
// NO_TICKER send calls down the slow path, which reads the clock: the
// ticker raises PRECISE just before a bucket boundary or the end of the
// cooldown, and NO_TICKER means no ticker drives this breaker. THREAD
// means the ticker thread of callers without a runtime drives it: the
// closed path ignores it, while a rejection and a failure, which take slow
// paths anyway, look for a runtime to hand the breaker to (whose clock may
// be paused, which the thread cannot follow).
const KIND: u64 = 0b11;
pub(crate) const CLOSED: u64 = 0b00;
pub(crate) const HALF_OPEN: u64 = 0b01;
pub(crate) const OPEN: u64 = 0b10;
const FORCED: u64 = 0b100;
// The tickers' bits, kept in every ticked word alike.
pub(crate) use crate::striped::{NO_TICKER, PRECISE, THREAD};
/// Bits that send calls to read the clock; only the tickers change them.
const CLOCK_BITS: u64 = PRECISE | NO_TICKER;
/// Bits that only the tickers change; transitions keep them as they are.
const TICKER_BITS: u64 = CLOCK_BITS | THREAD;
/// All of them zero: closed, not forced, no clock needed.
const FAST: u64 = KIND | FORCED | CLOCK_BITS;
const GEN_SHIFT: u32 = 32;

/// A decoded state word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StateWord(pub(crate) u64);

impl StateWord {
    /// A new breaker's word: closed, generation 0, driven by no ticker
    /// yet.
    pub(crate) const INITIAL: StateWord = StateWord::new(CLOSED, false, 0, NO_TICKER);

    pub(crate) const fn new(
        kind: u64,
        forced: bool,
        generation: u32,
        clock_bits: u64,
    ) -> StateWord {
        StateWord(
            kind | if forced { FORCED } else { 0 }
                | (clock_bits & TICKER_BITS)
                | ((generation as u64) << GEN_SHIFT),
        )
    }

    pub(crate) const fn state(self) -> State {
        State::from_bits(self.0)
    }

    /// `CLOSED`, `HALF_OPEN` or `OPEN`.
    pub(crate) const fn kind(self) -> u64 {
        self.0 & KIND
    }

    pub(crate) const fn is_open(self) -> bool {
        self.kind() == OPEN
    }

    pub(crate) const fn is_half_open(self) -> bool {
        self.kind() == HALF_OPEN
    }

    pub(crate) const fn forced(self) -> bool {
        self.0 & FORCED != 0
    }

    /// Open and not forced: the cooldown runs, and its end moves the
    /// breaker to half-open.
    pub(crate) const fn cooling_down(self) -> bool {
        self.is_open() && !self.forced()
    }

    /// Closed and not forced: a failure may trip it.
    pub(crate) const fn may_trip(self) -> bool {
        self.0 & (KIND | FORCED) == CLOSED
    }

    /// The closed path: closed, not forced, no clock needed.
    pub(crate) const fn is_fast(self) -> bool {
        self.0 & FAST == 0
    }

    /// A call is rejected at once, without a clock read: open with no
    /// clock needed and no runtime to look for, or forced open.
    pub(crate) const fn rejects_at_once(self) -> bool {
        self.0 & (KIND | CLOCK_BITS | THREAD) == OPEN || self.0 & (KIND | FORCED) == OPEN | FORCED
    }

    pub(crate) const fn needs_clock(self) -> bool {
        self.0 & CLOCK_BITS != 0
    }

    /// No ticker drives the breaker (`NO_TICKER`).
    #[cfg_attr(loom, allow(dead_code))] // the ticker is outside the model
    pub(crate) const fn unticked(self) -> bool {
        self.0 & NO_TICKER != 0
    }

    /// The ticker thread of callers without a runtime drives the breaker
    /// (`THREAD`).
    pub(crate) const fn on_thread(self) -> bool {
        self.0 & THREAD != 0
    }

    /// No runtime's ticker drives the breaker: none does, or the thread
    /// does. A call inside a runtime hands it to that runtime's ticker.
    pub(crate) const fn wants_runtime_ticker(self) -> bool {
        self.0 & (NO_TICKER | THREAD) != 0
    }

    /// What to `fetch_and` the state word with to hand the breaker to a
    /// runtime's ticker: the bits of [`wants_runtime_ticker`](Self::wants_runtime_ticker) cleared.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) const RUNTIME_TICKER: u64 = !(NO_TICKER | THREAD);

    pub(crate) const fn generation(self) -> u32 {
        (self.0 >> GEN_SHIFT) as u32
    }

    /// The word after a transition to `kind`: the next generation, the
    /// clock bits unchanged.
    pub(crate) const fn next(self, kind: u64, forced: bool) -> StateWord {
        StateWord::new(kind, forced, self.generation().wrapping_add(1), self.0)
    }

    /// The state string carried by a rejection.
    pub(crate) const fn rejection(self) -> &'static str {
        if self.forced() {
            "forced open"
        } else {
            self.state().as_str()
        }
    }
}

// The probes word: | half-open generation (32) | successes (16) | in flight (16) |
//
// Stamped with the generation of the half-open state it belongs to, so a
// late probe of an earlier half-open period can neither take nor free a
// slot of the current one. The first admission of a new half-open period
// stamps it; nobody has to reset it on the transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Probes(pub(crate) u64);

impl Probes {
    pub(crate) const fn new(generation: u32, successes: u16, in_flight: u16) -> Probes {
        Probes(((generation as u64) << 32) | ((successes as u64) << 16) | in_flight as u64)
    }
    pub(crate) const fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
    pub(crate) const fn successes(self) -> u16 {
        (self.0 >> 16) as u16
    }
    pub(crate) const fn in_flight(self) -> u16 {
        self.0 as u16
    }
}

/// `a` is a later generation than `b`, modulo wrapping.
pub(crate) const fn later(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_gauge_values_follow_the_spec() {
        assert_eq!(
            [State::Closed, State::HalfOpen, State::Open].map(State::as_gauge),
            [0, 1, 2]
        );
        assert_eq!(State::HalfOpen.to_string(), "half-open");
    }

    #[test]
    fn words_round_trip() {
        let w = StateWord::new(OPEN, true, 7, PRECISE);
        assert_eq!(w.state(), State::Open);
        assert!(w.forced() && w.needs_clock());
        assert_eq!(w.generation(), 7);
        assert_eq!(w.rejection(), "forced open");
        assert_eq!(
            StateWord::new(OPEN, false, 1, THREAD).next(CLOSED, false).0 & THREAD,
            THREAD
        );
        let n = w.next(CLOSED, false);
        assert_eq!(
            (n.state(), n.generation(), n.0 & CLOCK_BITS),
            (State::Closed, 8, PRECISE)
        );
        assert_eq!(StateWord::new(CLOSED, false, u32::MAX, 0).0 & FAST, 0);
        let p = Probes::new(3, 2, 1);
        assert_eq!((p.generation(), p.successes(), p.in_flight()), (3, 2, 1));
        assert!(later(0, u32::MAX) && !later(5, 5) && later(6, 5));
    }
}
