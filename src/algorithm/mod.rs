//! The decision functions: pure arithmetic on `(limit, previous state, frame, ask)`.
//!
//! Nothing here performs I/O, awaits, or reads a clock: time arrives in a [`Frame`]. The Redis
//! Lua scripts are ports of these functions, so every quantity is an integer number of
//! microseconds or hits and stays below 2^53 for limits that validation accepts.

pub mod fixed_window;

use crate::model::Micros;

/// Which algorithm decides a limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    FixedWindow,
}

impl Algorithm {
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
        }
    }
}

/// A validated limit: `requests` per `window`, decided by `algorithm`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Limit {
    pub algorithm: Algorithm,
    pub requests: u64,
    /// Window length in microseconds (> 0).
    pub window: Micros,
}

impl Limit {
    pub fn fixed_window(requests: u64, window: Micros) -> Self {
        Limit {
            algorithm: Algorithm::FixedWindow,
            requests,
            window,
        }
    }

    /// The frame of `now` for this limit: windows aligned to the epoch.
    pub fn frame(&self, now: Micros) -> Frame {
        Frame::epoch_aligned(now, self.window)
    }
}

/// "Now", and the bounds of the window that contains it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    pub now: Micros,
    pub window_start: Micros,
    pub window_end: Micros,
}

impl Frame {
    pub fn epoch_aligned(now: Micros, window: Micros) -> Frame {
        let window = window.max(1);
        let window_start = now - now.rem_euclid(window);
        Frame {
            now,
            window_start,
            window_end: window_start.saturating_add(window),
        }
    }
}

/// What one request asks of one limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ask {
    pub hits: u64,
    /// Give `hits` back instead of taking them.
    pub refund: bool,
}

impl Ask {
    pub fn take(hits: u64) -> Self {
        Ask {
            hits,
            refund: false,
        }
    }
    pub fn peek() -> Self {
        Ask::take(0)
    }
}

/// The state an algorithm keeps per key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    FixedWindow(fixed_window::State),
}

/// The answer of one decision function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub allowed: bool,
    /// When allowed: how many more single-hit requests would pass after this one is charged.
    /// When rejected: 0.
    pub remaining: u64,
    /// When allowed: time until the limit is back to its full allowance (after charging).
    /// When rejected: time after which this request would be allowed (retry-after).
    pub reset: Micros,
    /// The state after charging this ask (beyond the limit, as debt, when rejected). The store
    /// keeps it only if the request is charged.
    pub charged: State,
    /// When `charged` becomes equivalent to no state at all: the store may forget it then.
    pub expires_at: Micros,
}

/// Decides `ask` against `limit` given the previous state (if any).
pub fn evaluate(limit: &Limit, state: Option<&State>, frame: Frame, ask: Ask) -> Outcome {
    match limit.algorithm {
        Algorithm::FixedWindow => {
            let prev = match state {
                Some(State::FixedWindow(s)) => Some(s),
                _ => None,
            };
            fixed_window::evaluate(limit.requests, prev, frame, ask)
        }
    }
}

/// Whether `state` is over its limit at `frame` (an eviction must not forget such a key
/// silently).
pub fn is_over_limit(limit: &Limit, state: &State, frame: Frame) -> bool {
    !evaluate(limit, Some(state), frame, Ask::take(1)).allowed
}
