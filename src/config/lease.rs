//! Validation of a `concurrency` limit's keys: `max_in_flight` and `lease_time` stand for the
//! rate and the window, which mean nothing for requests in flight and are refused.

use super::error::Position;
use super::raw::RawRateLimit;
use super::validate::{duration_of, Cx, Shape};
use crate::model::{Micros, Unit};

/// How long a concurrency lease lasts if it is never released, unless `lease_time` says.
pub(super) const DEFAULT_LEASE_TIME: Micros = 60 * 1_000_000;

impl Cx<'_> {
    /// A concurrency limit's `max_in_flight` and `lease_time`, in the shape of a rate: the
    /// lease time is the window (reported as the nearest unit), `max_in_flight` the requests.
    /// Rates and windows mean nothing here and are refused.
    pub(super) fn in_flight(
        &mut self,
        rl: &RawRateLimit,
        pos: &Position,
    ) -> (Option<Shape>, Option<u32>) {
        let mut ok = true;
        if let Some(r) = &rl.requests_per_unit {
            let p = self.at(r);
            self.err(p, "concurrency limits requests in flight, not a rate: use max_in_flight instead of requests_per_unit");
            ok = false;
        }
        for (key, at) in [
            ("unit", rl.unit.as_ref().map(|u| self.at(u))),
            ("window", rl.window.as_ref().map(|w| self.at(w))),
        ] {
            if let Some(p) = at {
                self.err(p, format!("concurrency has no {key}: a lease lasts until it is released, or at most lease_time"));
                ok = false;
            }
        }
        let n = match &rl.max_in_flight {
            Some(m) => self.count(m),
            None => {
                self.err(
                    pos.clone(),
                    "concurrency needs max_in_flight (the most requests in flight; 0 blocks every request)",
                );
                None
            }
        };
        let lease = match &rl.lease_time {
            None => Some(DEFAULT_LEASE_TIME),
            Some(l) => duration_of("lease_time", &l.value)
                .map_err(|m| {
                    let p = self.at(l);
                    self.err(p, m);
                })
                .ok(),
        };
        match (ok, n, lease) {
            (true, Some(n), Some(lease)) => (Some((Unit::nearest(lease), lease, None)), Some(n)),
            _ => (None, None),
        }
    }
}
