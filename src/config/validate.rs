//! Validation of what a descriptor limits: its `rate_limit` or `rate_limits` (each limit's
//! rate, unit or window, algorithm and parameters), the `replaces` lists, and the words of
//! enum-like fields. Every problem goes to the load's error list with its position; a part
//! with a problem yields `None`, so the tree is only built from valid parts.

use std::sync::Arc;

use serde_saphyr::Spanned;

use super::error::{ConfigError, Position};
use super::raw::{Count, RawDescriptor, RawRateLimit};
use crate::algorithm::{Algorithm, Calendar, InvalidLimit, Limit, Param, MAX_WINDOW};
use crate::excerpt::excerpt;
use crate::model::{Micros, Unit};
use crate::rules::vocab::{self, one_of, Word};
use crate::rules::{duration, Charge, FailurePolicy, RuleIds, RuleKind, RuleLimit};

/// A limit's window: (unit reported in current_limit, window in µs, the unit if one was named).
pub(super) type Shape = (Unit, Micros, Option<Unit>);

/// Where errors of one file go.
pub(super) struct Cx<'a> {
    pub file: &'a Arc<str>,
    pub errors: &'a mut Vec<ConfigError>,
    /// The ids of this rule set's rules.
    pub ids: &'a mut RuleIds,
}

/// A descriptor's validated limits: what its rule holds beyond the descriptor's own flags.
pub(super) struct Limits {
    /// The rule's name (`rate_limit`'s; none for `rate_limits`).
    pub name: Option<String>,
    pub kind: RuleKind,
    pub replaces: Vec<String>,
    /// Where the limit (or the list of limits) is written.
    pub position: Position,
}

vocab::words! {
    /// How windows are placed (`align` of a limit).
    pub(crate) enum Align as "align" {
        /// Windows counted from the Unix epoch.
        Epoch = "epoch",
        /// Windows aligned to local hours, days, weeks, months or years (`timezone`).
        Calendar = "calendar",
    }
}

impl Cx<'_> {
    pub(super) fn at<T>(&self, s: &Spanned<T>) -> Position {
        Position::at(self.file, s.referenced)
    }

    pub(super) fn err(&mut self, pos: Position, msg: impl Into<String>) {
        self.errors.push(ConfigError::new(pos, msg));
    }

    /// A whole-number field: its value, or its error at its position.
    pub(super) fn count(&mut self, c: &Spanned<Count>) -> Option<u32> {
        match c.value.0 {
            Ok(n) => Some(n),
            Err(m) => {
                let at = self.at(c);
                self.err(at, m);
                None
            }
        }
    }

    /// An enum-like field: its value, or an error that lists every accepted word.
    pub(super) fn word<W: Word>(&mut self, s: &Spanned<String>) -> Option<W> {
        match vocab::parse(&s.value) {
            Ok(w) => Some(w),
            Err(e) => {
                let at = self.at(s);
                self.err(at, e.to_string());
                None
            }
        }
    }

    /// The descriptor's `rate_limit` or `rate_limits`; `None` when it has neither or when
    /// they have errors.
    pub(super) fn limits(&mut self, d: &RawDescriptor) -> Option<Limits> {
        match (&d.rate_limit, &d.rate_limits) {
            (Some(_), Some(list)) => {
                let p = self.at(list);
                self.err(
                    p,
                    "a descriptor has either rate_limit or rate_limits, not both (put every limit in rate_limits)",
                );
                None
            }
            (Some(rl), None) => self.one(rl),
            (None, Some(list)) => self.several(list),
            (None, None) => None,
        }
    }

    /// `rate_limit`: one limit, or `unlimited`.
    fn one(&mut self, spanned: &Spanned<RawRateLimit>) -> Option<Limits> {
        let rl = &spanned.value;
        let position = self.at(spanned);
        let before = self.errors.len();
        let name = name_of(rl);
        let replaces = self.replaces(rl, name.as_slice(), |n| {
            format!("rate limit '{}' cannot replace itself", excerpt(n))
        });
        let kind = if rl.unlimited {
            if let Some(u) = &rl.unit {
                let p = self.at(u);
                self.err(p, "should not specify rate limit unit when unlimited");
            }
            if let Some(w) = &rl.window {
                let p = self.at(w);
                self.err(p, "should not specify a window when unlimited");
            }
            RuleKind::Unlimited
        } else {
            match self.limit(rl, position.clone(), name.clone()) {
                Some(limit) => RuleKind::Limited(limit),
                None => RuleKind::Unlimited,
            }
        };
        (self.errors.len() == before).then_some(Limits {
            name,
            kind,
            replaces,
            position,
        })
    }

    /// `rate_limits`: several named limits, all of which must pass.
    fn several(&mut self, list: &Spanned<Vec<Spanned<RawRateLimit>>>) -> Option<Limits> {
        let before = self.errors.len();
        let position = self.at(list);
        if list.value.is_empty() {
            self.err(position.clone(), "rate_limits needs at least one limit");
        }
        let mut names: Vec<(String, Position)> = Vec::new();
        for item in &list.value {
            match item.value.name.as_ref().filter(|n| !n.value.is_empty()) {
                None => {
                    let p = self.at(item);
                    self.err(
                        p,
                        "each limit in rate_limits needs a name (it tells the limits apart in statuses, replaces and storage keys)",
                    );
                }
                Some(n) => {
                    let p = self.at(n);
                    if let Some((_, first)) = names.iter().find(|(m, _)| *m == n.value) {
                        let msg = format!(
                            "duplicate limit name '{}' in rate_limits (first at {first})",
                            excerpt(&n.value)
                        );
                        self.err(p, msg);
                    } else {
                        names.push((n.value.clone(), p));
                    }
                }
            }
        }
        let own: Vec<String> = names.into_iter().map(|(n, _)| n).collect();
        let mut limits = Vec::new();
        let mut replaces = Vec::new();
        for item in &list.value {
            let rl = &item.value;
            replaces.extend(self.replaces(rl, &own, |n| {
                format!(
                    "rate limit '{}' is on this same descriptor and cannot be replaced by it",
                    excerpt(n)
                )
            }));
            let ipos = self.at(item);
            if rl.unlimited {
                self.err(
                    ipos,
                    "unlimited cannot be used inside rate_limits; write `rate_limit: {unlimited: true}` to make the descriptor unlimited",
                );
                continue;
            }
            if let Some(limit) = self.limit(rl, ipos, name_of(rl)) {
                limits.push(limit);
            }
        }
        (self.errors.len() == before).then_some(Limits {
            name: None,
            kind: RuleKind::Several(limits),
            replaces,
            position,
        })
    }

    /// The names a limit's `replaces` lists; a name in `own` (the descriptor's own limits)
    /// is refused with `refusal(name)`.
    fn replaces(
        &mut self,
        rl: &RawRateLimit,
        own: &[String],
        refusal: impl Fn(&str) -> String,
    ) -> Vec<String> {
        let mut out = Vec::new();
        for r in rl.replaces.iter().flatten() {
            match r.value.name.as_ref().filter(|n| !n.value.is_empty()) {
                None => {
                    let p = self.at(r);
                    self.err(p, "replaces entry must have a non-empty name")
                }
                Some(n) if own.contains(&n.value) => {
                    let p = self.at(n);
                    self.err(p, refusal(&n.value))
                }
                Some(n) => out.push(n.value.clone()),
            }
        }
        out
    }

    /// One limit: rate, unit or window, algorithm and its parameters, validated.
    fn limit(
        &mut self,
        rl: &RawRateLimit,
        pos: Position,
        name: Option<String>,
    ) -> Option<RuleLimit> {
        let before = self.errors.len();
        let charge = rl.charge.as_ref().and_then(|c| self.word::<Charge>(c));
        let on_error = rl
            .on_store_error
            .as_ref()
            .and_then(|p| self.word::<FailurePolicy>(p));
        // An unknown algorithm is reported; fixed_window stands in so the other keys are
        // still checked.
        let algorithm = rl
            .algorithm
            .as_ref()
            .map_or(Some(Algorithm::DEFAULT), |a| self.word(a))
            .unwrap_or(Algorithm::DEFAULT);
        let (shape, rpu) = if algorithm.leases() {
            self.in_flight(rl, &pos)
        } else {
            for (key, at) in [
                (
                    "max_in_flight",
                    rl.max_in_flight.as_ref().map(|m| self.at(m)),
                ),
                ("lease_time", rl.lease_time.as_ref().map(|l| self.at(l))),
            ] {
                if let Some(p) = at {
                    self.err(
                        p,
                        format!(
                            "{key} applies to {}, not to {}",
                            Algorithm::names_where(Algorithm::leases),
                            algorithm.as_str()
                        ),
                    );
                }
            }
            (self.shape(rl, &pos), self.rate(rl))
        };
        let burst = rl.burst.as_ref().map(|b| (b, self.count(b)));
        let precision = rl.precision.as_ref().map(|p| (p, self.count(p)));
        // A bad rate is reported; the limit's other checks would only add noise about it.
        let rpu = rpu?;
        let (unit, window, named_unit) = shape?;
        // A bad value is reported already; the limit is dropped at the end.
        let burst =
            burst.and_then(|(at, v)| self.applies(at, Param::Burst, algorithm).then_some(v)?);
        let precision = precision
            .and_then(|(at, v)| self.applies(at, Param::Precision, algorithm).then_some(v)?);
        let calendar = match &rl.align {
            Some(a) if self.word::<Align>(a) == Some(Align::Calendar) => {
                self.calendar(rl, a, algorithm, named_unit)
            }
            _ => {
                if let Some(t) = &rl.timezone {
                    let p = self.at(t);
                    self.err(p, "timezone applies only with align: calendar");
                }
                None
            }
        };
        if self.errors.len() > before {
            return None;
        }
        let built = Limit::new(algorithm, u64::from(rpu), window)
            .and_then(|l| burst.map_or(Ok(l.clone()), |b| l.with_burst(u64::from(b))))
            .and_then(|l| precision.map_or(Ok(l.clone()), |p| l.with_precision(p)))
            .and_then(|l| calendar.map_or(Ok(l.clone()), |c| l.with_calendar(c)));
        let limit = match built {
            Ok(limit) => limit,
            Err(e) => {
                let p = rl
                    .requests_per_unit
                    .as_ref()
                    .or(rl.max_in_flight.as_ref())
                    .map_or(pos.clone(), |r| self.at(r));
                self.err(p, e.to_string());
                return None;
            }
        };
        Some(RuleLimit {
            name,
            requests_per_unit: rpu,
            unit,
            limit,
            charge,
            on_error,
            key_tail: Default::default(),
        })
    }

    /// A rate limit's window: `unit` or `window`, as (unit reported in current_limit, window
    /// in µs, the unit if one was named).
    fn shape(&mut self, rl: &RawRateLimit, pos: &Position) -> Option<Shape> {
        match (&rl.unit, &rl.window) {
            (Some(_), Some(w)) => {
                let p = self.at(w);
                self.err(p, "use either unit or window, not both");
                None
            }
            (None, Some(w)) => match duration_of("window", &w.value) {
                Ok(window) => Some((Unit::nearest(window), window, None)),
                Err(m) => {
                    let p = self.at(w);
                    self.err(p, m);
                    None
                }
            },
            (Some(u), None) => self
                .word::<Unit>(u)
                .map(|unit| (unit, unit.micros(), Some(unit))),
            (None, None) => {
                self.err(
                    pos.clone(),
                    format!("rate_limit needs a unit ({})", one_of::<Unit>()),
                );
                None
            }
        }
    }

    /// `requests_per_unit`; envoyproxy/ratelimit reads a missing one as 0 (block everything).
    fn rate(&mut self, rl: &RawRateLimit) -> Option<u32> {
        rl.requests_per_unit
            .as_ref()
            .map_or(Some(0), |r| self.count(r))
    }

    /// Whether `algorithm` takes `param` (written at `at`); if not, says so there.
    fn applies(&mut self, at: &Spanned<Count>, param: Param, algorithm: Algorithm) -> bool {
        if algorithm.takes(param) {
            return true;
        }
        let p = self.at(at);
        let e = InvalidLimit::NotApplicable { param, algorithm };
        self.err(p, e.to_string());
        false
    }

    /// `align: calendar` (written at `align`): the calendar of the windows.
    fn calendar(
        &mut self,
        rl: &RawRateLimit,
        align: &Spanned<String>,
        algorithm: Algorithm,
        named_unit: Option<Unit>,
    ) -> Option<Calendar> {
        let p = self.at(align);
        let tz = match &rl.timezone {
            None => Some(chrono_tz::UTC),
            Some(t) => t.value.parse::<chrono_tz::Tz>().ok().or_else(|| {
                let tp = self.at(t);
                self.err(
                    tp,
                    format!("unknown time zone '{}' (expected an IANA name such as Asia/Shanghai or UTC)", excerpt(&t.value)),
                );
                None
            }),
        };
        match named_unit {
            _ if !algorithm.takes(Param::Calendar) => {
                let e = InvalidLimit::NotApplicable {
                    param: Param::Calendar,
                    algorithm,
                };
                self.err(p, e.to_string());
                None
            }
            Some(u @ (Unit::Hour | Unit::Day | Unit::Week | Unit::Month | Unit::Year)) => {
                tz.map(|tz| Calendar { unit: u, tz })
            }
            _ => {
                self.err(
                    p,
                    "align: calendar needs a unit of hour, day, week, month or year (not a window or a shorter unit)",
                );
                None
            }
        }
    }
}

/// A limit's name, if it has a non-empty one.
fn name_of(rl: &RawRateLimit) -> Option<String> {
    rl.name
        .as_ref()
        .map(|n| n.value.clone())
        .filter(|n| !n.is_empty())
}

/// A `window` or `lease_time` (`field`): a duration of the one grammar ([`duration`]), a whole
/// number of microseconds, longer than zero and at most [`MAX_WINDOW`].
pub(super) fn duration_of(field: &str, s: &str) -> Result<Micros, String> {
    let shown = excerpt(s);
    let d = duration::parse(s)
        .map_err(|_| format!("invalid {field} '{shown}' ({})", duration::EXPECTED))?;
    if !d.as_nanos().is_multiple_of(1_000) {
        return Err(format!(
            "{field} '{shown}' is not a whole number of microseconds"
        ));
    }
    match Micros::try_from(d.as_micros()) {
        Ok(0) => Err(format!("{field} '{shown}' must be longer than zero")),
        Ok(w) if w <= MAX_WINDOW => Ok(w),
        _ => Err(format!(
            "{field} '{shown}' is longer than the longest supported window of 10 years"
        )),
    }
}

#[cfg(test)]
mod window_tests;
