//! How long matching may go on: the caller's deadline, asked at a coarse granularity so that
//! a request whose matching outlasts it (a costly rule set, say many wildcard pieces each
//! ending with the next, over long values) gives its serving thread back instead of holding it
//! past the time anyone waits for the answer. The rule tree reads no clock: the caller hands
//! in the question.

/// Matching gave up: the deadline passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expired;

/// Work matching may still do; see [`Budget::spend`].
pub struct Budget<'a> {
    expired: Option<&'a dyn Fn() -> bool>,
    left: u64,
}

impl<'a> Budget<'a> {
    /// Units of work between two questions. A unit is about one wildcard occurrence (tens of
    /// nanoseconds), so the deadline is asked every 0.1 ms or so of matching.
    pub const STRIDE: u64 = 4096;

    /// No deadline: matching always runs to its end.
    pub fn unlimited() -> Budget<'static> {
        Budget {
            expired: None,
            left: Self::STRIDE,
        }
    }

    /// Until `expired` says so.
    pub fn new(expired: &'a dyn Fn() -> bool) -> Budget<'a> {
        Budget {
            expired: Some(expired),
            left: Self::STRIDE,
        }
    }

    /// Spends `units` of work; `Err` once the deadline has passed (asked once per
    /// [`Self::STRIDE`] units).
    pub fn spend(&mut self, units: u64) -> Result<(), Expired> {
        let Some(expired) = self.expired else {
            return Ok(());
        };
        if units < self.left {
            self.left -= units;
            return Ok(());
        }
        self.left = Self::STRIDE;
        if expired() {
            Err(Expired)
        } else {
            Ok(())
        }
    }

    /// The units of looking at `bytes` bytes once (hashing, an automaton pass).
    pub fn bytes(bytes: usize) -> u64 {
        1 + bytes as u64 / 64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn the_deadline_is_asked_once_per_stride() {
        let asked = Cell::new(0);
        let expired = || {
            asked.set(asked.get() + 1);
            asked.get() > 1
        };
        let mut b = Budget::new(&expired);
        for _ in 0..Budget::STRIDE - 1 {
            assert_eq!(b.spend(1), Ok(()));
        }
        assert_eq!(asked.get(), 0);
        assert_eq!(b.spend(1), Ok(()), "first question: not yet");
        assert_eq!(b.spend(Budget::STRIDE), Err(Expired));
        let mut free = Budget::unlimited();
        assert_eq!(free.spend(u64::MAX), Ok(()));
    }
}
