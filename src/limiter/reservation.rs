//! A reservation of the native API as a record: what Reserve charged (each check's key, limit,
//! distinct value and hits), so that Commit and Cancel can give it back or charge an overrun
//! through the one `Store::decide`, whatever the rules are by then, on any replica. Encoded
//! as JSON (versioned) for the store, which keeps it as opaque bytes; the id is 128 bits from
//! the OS CSPRNG, so ids can be neither guessed nor enumerated.

use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use super::plan::Plan;
use crate::algorithm::{Algorithm, Ask, Calendar, Limit, Param, DEFAULT_PRECISION};
use crate::model::{Micros, Unit};
use crate::store::{Charge, Check, Verdict};

/// The record layout's version (a record of another version is refused, not misread).
const VERSION: u32 = 1;

/// What one reservation holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    v: u32,
    pub domain: String,
    /// When the reservation expires, by sluice's clock: a claim after it finds nothing,
    /// whatever the store still holds (Redis expires records by its own clock, a backstop).
    pub expires_at: Micros,
    pub holds: Vec<Hold>,
}

/// One charged check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Hold {
    pub key: Vec<u8>,
    algorithm: String,
    requests: u64,
    window: i64,
    burst: u64,
    precision: u32,
    /// A calendar window's unit and time zone.
    calendar: Option<(String, String)>,
    /// distinct: the counted value's hash.
    value: u64,
    /// The hits Reserve charged.
    pub hits: u64,
}

impl Record {
    /// The checks of `plan` that Reserve charged (a refund or a look holds nothing).
    pub(crate) fn of(plan: &Plan<'_>, verdicts: &[Verdict], expires_at: Micros) -> Record {
        let holds = plan
            .checks()
            .iter()
            .zip(verdicts)
            .filter(|(c, v)| v.charged && !c.ask.refund && c.ask.hits > 0)
            .map(|(c, _)| Hold {
                key: c.key.to_vec(),
                algorithm: c.limit.algorithm().as_str().to_string(),
                requests: c.limit.requests(),
                window: c.limit.window(),
                // Every hold has both numbers, whether its algorithm takes them or not.
                burst: c.limit.burst().unwrap_or(c.limit.requests()),
                precision: c
                    .limit
                    .precision()
                    .map_or(DEFAULT_PRECISION.get(), |p| p.get()),
                calendar: c
                    .limit
                    .calendar()
                    .map(|cal| (cal.unit.as_str().to_string(), cal.tz.name().to_string())),
                value: c.ask.value,
                hits: c.ask.hits,
            })
            .collect();
        Record {
            v: VERSION,
            domain: plan.request.domain.clone(),
            expires_at,
            holds,
        }
    }

    /// Each hold's limit, in order.
    pub(crate) fn limits(&self) -> Result<Vec<Limit>, String> {
        self.holds.iter().map(Hold::limit).collect()
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Record, String> {
        let r: Record = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        if r.v != VERSION {
            return Err(format!(
                "record version {} (this sluice reads {VERSION})",
                r.v
            ));
        }
        for h in &r.holds {
            h.limit()?;
        }
        Ok(r)
    }
}

impl Hold {
    pub(crate) fn limit(&self) -> Result<Limit, String> {
        let algorithm = Algorithm::ALL
            .into_iter()
            .find(|a| a.as_str() == self.algorithm)
            .ok_or_else(|| format!("unknown algorithm {}", self.algorithm))?;
        let calendar = match &self.calendar {
            None => None,
            Some((unit, tz)) => Some(Calendar {
                unit: Unit::ALL
                    .into_iter()
                    .find(|u| u.as_str() == unit)
                    .ok_or_else(|| format!("unknown unit {unit}"))?,
                tz: tz.parse::<Tz>().map_err(|e| e.to_string())?,
            }),
        };
        let built = Limit::new(algorithm, self.requests, self.window).and_then(|l| match algorithm
            .param()
        {
            Some(Param::Burst) => l.with_burst(self.burst),
            Some(Param::Precision) => l.with_precision(self.precision),
            Some(Param::Calendar) => calendar.map_or(Ok(l.clone()), |c| l.with_calendar(c)),
            None => Ok(l),
        });
        built.map_err(|e| e.to_string())
    }

    /// The check that settles this hold at `actual` hits: gives back what was reserved but
    /// not used, or charges the overrun even over the limit (a debt the next requests pay).
    /// A `concurrency` hold is leases, not usage: the work is over once it is settled, so
    /// every lease is released whatever `actual` is. `None` when there is nothing to do.
    pub(crate) fn settle<'a>(
        &'a self,
        limit: &'a Limit,
        actual: u64,
        group: u32,
    ) -> Option<Check<'a>> {
        let actual = if limit.algorithm().leases() {
            0
        } else {
            actual
        };
        let ask = match actual.cmp(&self.hits) {
            std::cmp::Ordering::Equal => return None,
            std::cmp::Ordering::Less => Ask::refund(self.hits - actual),
            std::cmp::Ordering::Greater => Ask::take(actual - self.hits),
        };
        Some(Check {
            ask: Ask {
                value: self.value,
                ..ask
            },
            charge: Charge::Always,
            group,
            ..Check::new(&self.key, limit, ask)
        })
    }
}

/// A new reservation id: 128 random bits as 32 hex digits.
pub(crate) fn new_id() -> Result<String, String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| format!("no random bytes for a reservation id: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(hits: u64) -> Hold {
        Hold {
            key: b"k".to_vec(),
            algorithm: "fixed_window".into(),
            requests: 10,
            window: 60_000_000,
            burst: 10,
            precision: 10,
            calendar: Some(("DAY".into(), "Europe/Paris".into())),
            value: 0,
            hits,
        }
    }

    #[test]
    fn a_record_round_trips_and_a_bad_one_is_refused() {
        let r = Record {
            v: VERSION,
            domain: "d".into(),
            expires_at: 5,
            holds: vec![hold(3)],
        };
        assert_eq!(Record::decode(&r.encode()), Ok(r.clone()));
        let limit = r.holds[0].limit().expect("valid");
        assert_eq!(limit.algorithm(), Algorithm::FixedWindow);
        assert_eq!(limit.calendar().map(|c| c.tz.name()), Some("Europe/Paris"));
        // Each algorithm takes its own parameter from a hold, and only that one.
        let sliding = Hold {
            algorithm: "sliding_window".into(),
            precision: 6,
            ..hold(3)
        };
        let limit = sliding.limit().expect("valid");
        assert_eq!(limit.precision().map(|p| p.get()), Some(6));
        assert_eq!(limit.calendar(), None);
        let other = Record { v: 9, ..r.clone() };
        assert!(Record::decode(&other.encode()).is_err());
        let mut bad = r;
        bad.holds[0].algorithm = "nope".into();
        assert!(Record::decode(&bad.encode()).is_err());
        assert!(Record::decode(b"{").is_err());
    }

    #[test]
    fn settling_refunds_the_unused_and_charges_the_overrun() {
        let h = hold(5);
        let limit = h.limit().expect("valid");
        assert!(h.settle(&limit, 5, 0).is_none());
        let under = h.settle(&limit, 2, 0).expect("a refund");
        assert_eq!((under.ask.refund, under.ask.hits), (true, 3));
        let over = h.settle(&limit, 9, 1).expect("a charge");
        assert_eq!(
            (over.ask.refund, over.ask.hits, over.charge, over.group),
            (false, 4, Charge::Always, 1)
        );
    }

    #[test]
    fn settling_a_concurrency_hold_releases_every_lease() {
        let h = Hold {
            algorithm: "concurrency".into(),
            calendar: None,
            ..hold(2)
        };
        let limit = h.limit().expect("valid");
        for actual in [0, 2, 50] {
            let c = h.settle(&limit, actual, 0).expect("a release");
            assert_eq!((c.ask.refund, c.ask.hits), (true, 2), "actual {actual}");
        }
    }

    #[test]
    fn ids_are_128_bit_hex_and_differ() {
        let (a, b) = (new_id().expect("id"), new_id().expect("id"));
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
