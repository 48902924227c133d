//! The script's reply, decoded into one answer per check.

use super::*;

/// One check's answer from the script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    pub verdict: Verdict,
    /// Whether the check was allowed in the policy's first pass (what admission is computed
    /// from).
    pub first_allowed: bool,
}

/// The script's reply: the time it decided at, and one answer per check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub now: Micros,
    pub answers: Vec<Answer>,
}

/// `now` of a [`Scope::Settle`] call whose claim was gone: nothing was decided.
pub(super) const UNCLAIMED: Micros = -1;

impl Reply {
    /// A [`Scope::Settle`] call found its claim gone and changed nothing.
    pub fn unclaimed(&self) -> bool {
        self.now == UNCLAIMED
    }

    /// The verdicts alone, in a vector of their own: collected in place, the answers'
    /// allocation would be shrunk (a `realloc` on every request).
    pub fn verdicts(self) -> Vec<Verdict> {
        let mut v = Vec::with_capacity(self.answers.len());
        v.extend(self.answers.into_iter().map(|a| a.verdict));
        v
    }
}

/// Parses the flat integer reply for `n` checks: `batch.lua`'s, its short one for the short
/// layout (every check allowed and charged: remaining and reset each), or a fast path's for
/// its single check.
pub fn decode(reply: Vec<i64>, n: usize) -> Result<Reply, StoreError> {
    if n > 1 && reply.len() == 1 + 2 * n {
        let answers = reply[1..]
            .chunks_exact(2)
            .map(|a| Answer {
                verdict: Verdict {
                    allowed: true,
                    remaining: u64::try_from(a[0]).unwrap_or(0),
                    reset: a[1],
                    charged: true,
                    cached: false,
                },
                first_allowed: true,
            })
            .collect();
        return Ok(Reply {
            now: reply[0],
            answers,
        });
    }
    if reply == [UNCLAIMED] {
        return Ok(Reply {
            now: UNCLAIMED,
            answers: Vec::new(),
        });
    }
    if let ([now, flags, remaining, reset], 1) = (reply.as_slice(), n) {
        let allowed = flags & 1 != 0;
        return Ok(Reply {
            now: *now,
            answers: vec![Answer {
                verdict: Verdict {
                    allowed,
                    remaining: u64::try_from(*remaining).unwrap_or(0),
                    reset: *reset,
                    charged: flags & 2 != 0,
                    cached: false,
                },
                first_allowed: allowed,
            }],
        });
    }
    if reply.len() != 1 + n * 5 {
        return Err(StoreError::new(
            "redis",
            ErrorKind::Script,
            format!(
                "decision script answered {} values for {n} checks",
                reply.len()
            ),
        ));
    }
    let answers = reply[1..]
        .chunks_exact(5)
        .map(|a| Answer {
            verdict: Verdict {
                allowed: a[0] != 0,
                remaining: u64::try_from(a[1]).unwrap_or(0),
                reset: a[2],
                charged: a[3] != 0,
                cached: false,
            },
            first_allowed: a[4] != 0,
        })
        .collect();
    Ok(Reply {
        now: reply[0],
        answers,
    })
}
