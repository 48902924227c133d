//! The bound of the RLQS share, as a property: a fleet of simulated Envoys (each one bucket,
//! behaving as Envoy 1.40's rate_limit_quota filter does) reporting to one simulated sluice
//! over one fixed-window store admits, per window, no more than the limit plus one unassigned
//! first request per Envoy; and a stream with demand gets a token whenever any remain.
//! The sluice side composes the functions of `share` in the order `service::rlqs` does.

use std::collections::VecDeque;

use proptest::prelude::*;

use super::*;

const WINDOW: Micros = 60_000_000;
const TTL: Micros = 10_000_000;
const BUCKET: &[u8] = b"bucket";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Assign {
    Deny,
    Tokens { k: u64, generation: u64 },
}

/// One Envoy's bucket, as the filter keeps it.
#[derive(Default)]
struct Envoy {
    exists: bool,
    assignment: Option<Assign>,
    tokens: u64,
    /// The window whose grant the tokens came from.
    tokens_window: u64,
    allowed: u64,
    denied: u64,
    /// Assignments sent and not yet applied (lagged delivery).
    pending: VecDeque<(Assign, u64)>,
}

impl Envoy {
    fn apply(&mut self, a: Assign, window: u64) {
        match a {
            Assign::Deny => self.tokens = 0,
            // Envoy keeps its bucket when the assignment repeats the same token bucket.
            Assign::Tokens { k, .. } if self.assignment != Some(a) => {
                self.tokens = k;
                self.tokens_window = window;
            }
            Assign::Tokens { .. } => {}
        }
        self.assignment = Some(a);
    }
}

struct Sluice {
    limit: u64,
    /// The store's count in the current window (charges and reservations).
    used: u64,
    now: Micros,
    window_end: Micros,
    ledgers: Vec<Ledger>,
    last_demand: Vec<u64>,
    demands: Demands,
}

impl Sluice {
    /// A report: settle, charge the excess (never refused), record demand, renew if due.
    fn report(&mut self, s: usize, allowed: u64, denied: u64) -> Option<Assign> {
        let excess = self.ledgers[s].settle(allowed);
        self.used = self.used.saturating_add(excess);
        self.last_demand[s] = allowed + denied;
        self.demands
            .set(BUCKET, s as u64, allowed + denied, self.now);
        self.ledgers[s].renew(self.now).then(|| self.renew(s))
    }

    fn renew(&mut self, s: usize) -> Assign {
        let remaining = self.limit.saturating_sub(self.used);
        let others = self.demands.others(BUCKET, s as u64, self.now, TTL);
        let k = share(remaining, self.last_demand[s], others);
        assert!(k <= remaining, "a reservation the store would refuse");
        if remaining > 0 {
            assert!(k >= 1, "stream {s} starved with {remaining} remaining");
        }
        self.used += k;
        self.ledgers[s].grant(k, Some(self.window_end));
        if k == 0 {
            Assign::Deny
        } else {
            Assign::Tokens {
                k,
                generation: self.ledgers[s].generation,
            }
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Event {
    Request(usize),
    Report(usize),
    Deliver(usize),
    WindowEnd,
}

fn events(streams: usize) -> impl Strategy<Value = Vec<Event>> {
    prop::collection::vec(
        (0u8..20, 0..streams).prop_map(|(kind, s)| match kind {
            0..=11 => Event::Request(s),
            12..=15 => Event::Report(s),
            16..=18 => Event::Deliver(s),
            _ => Event::WindowEnd,
        }),
        1..400,
    )
}

/// Runs `events`; `lagged`: assignments wait for a `Deliver` event instead of arriving at once.
/// Returns, per window, (admitted, unassigned first requests, other admissions without an
/// assignment or with tokens of an earlier window).
fn simulate(limit: u64, streams: usize, events: &[Event], lagged: bool) -> Vec<(u64, u64, u64)> {
    let mut sluice = Sluice {
        limit,
        used: 0,
        now: 0,
        window_end: WINDOW,
        ledgers: vec![Ledger::default(); streams],
        last_demand: vec![0; streams],
        demands: Demands::default(),
    };
    let mut envoys: Vec<Envoy> = (0..streams).map(|_| Envoy::default()).collect();
    let mut window = 0u64;
    let mut per_window = vec![(0u64, 0u64, 0u64)];
    let send = |e: &mut Envoy, a: Option<Assign>, window: u64| {
        if let Some(a) = a {
            if lagged {
                e.pending.push_back((a, window));
            } else {
                e.apply(a, window);
            }
        }
    };
    for ev in events {
        let w = window as usize;
        match *ev {
            Event::Request(s) => {
                let e = &mut envoys[s];
                if !e.exists {
                    // A new bucket: the request is allowed (no_assignment_behavior) and the
                    // first report goes out at once.
                    e.exists = true;
                    per_window[w].0 += 1;
                    per_window[w].1 += 1;
                    let a = sluice.report(s, 1, 0);
                    send(e, a, window);
                    continue;
                }
                let admitted = match e.assignment {
                    None => {
                        per_window[w].2 += 1;
                        true
                    }
                    Some(Assign::Deny) => false,
                    Some(Assign::Tokens { .. }) if e.tokens > 0 => {
                        e.tokens -= 1;
                        if e.tokens_window != window {
                            per_window[w].2 += 1;
                        }
                        true
                    }
                    Some(Assign::Tokens { .. }) => false,
                };
                if admitted {
                    e.allowed += 1;
                    per_window[w].0 += 1;
                } else {
                    e.denied += 1;
                }
            }
            Event::Report(s) => {
                let e = &mut envoys[s];
                if e.exists {
                    let (allowed, denied) = (e.allowed, e.denied);
                    e.allowed = 0;
                    e.denied = 0;
                    let a = sluice.report(s, allowed, denied);
                    send(e, a, window);
                }
            }
            Event::Deliver(s) => {
                let e = &mut envoys[s];
                if let Some((a, from)) = e.pending.pop_front() {
                    e.apply(a, from);
                }
            }
            Event::WindowEnd => {
                // The store's window resets; sluice's timer renews every grant of the old one.
                sluice.now = sluice.window_end;
                sluice.window_end += WINDOW;
                sluice.used = 0;
                window += 1;
                per_window.push((0, 0, 0));
                for (s, e) in envoys.iter_mut().enumerate() {
                    if e.exists && sluice.ledgers[s].renew(sluice.now) {
                        let a = sluice.renew(s);
                        send(e, Some(a), window);
                    }
                }
            }
        }
    }
    per_window
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The bound of issue 16: with assignments arriving before the next request, every window
    /// admits at most the limit plus one first request per Envoy that started in it.
    #[test]
    fn a_fleet_admits_no_more_than_the_limit_plus_one_first_request_per_envoy(
        limit in 0u64..30,
        (streams, events) in (1usize..8).prop_flat_map(|n| (Just(n), events(n))),
    ) {
        for (w, (admitted, first, other)) in simulate(limit, streams, &events, false).into_iter().enumerate() {
            prop_assert_eq!(other, 0, "window {}: admissions outside the grants", w);
            prop_assert!(first <= streams as u64);
            prop_assert!(
                admitted <= limit + first,
                "window {}: {} admitted, limit {} + {} first requests", w, admitted, limit, first
            );
        }
    }

    /// With assignments delayed, what Envoy admits before its first assignment arrives (its
    /// no_assignment_behavior) or with a grant of a window that has ended comes on top, and
    /// nothing else does.
    #[test]
    fn late_assignments_add_only_what_envoy_admits_while_waiting(
        limit in 0u64..30,
        (streams, events) in (1usize..8).prop_flat_map(|n| (Just(n), events(n))),
    ) {
        for (w, (admitted, first, other)) in simulate(limit, streams, &events, true).into_iter().enumerate() {
            prop_assert!(
                admitted <= limit + first + other,
                "window {}: {} admitted, limit {} + {} + {}", w, admitted, limit, first, other
            );
        }
    }
}

#[test]
fn the_share_follows_demand_and_never_starves() {
    assert_eq!(share(0, 5, 5), 0);
    assert_eq!(share(10, 1, 1), 5, "half, by demand");
    assert_eq!(share(100, 1, 0), 50, "alone: half of what remains");
    assert_eq!(share(100, 10, 30), 25);
    assert_eq!(share(100, 30, 10), 60, "capped by 2 x 30");
    assert_eq!(share(3, 1, 1_000), 1, "at least 1 while anything remains");
    assert_eq!(
        share(3, 0, 0),
        2,
        "a stream that reported nothing counts as 1"
    );
    assert_eq!(share(u64::MAX, u64::MAX, u64::MAX), u64::MAX / 2);
}

#[test]
fn a_ledger_settles_reports_and_renews_when_used_up_or_void() {
    let mut l = Ledger::default();
    assert!(l.renew(0), "nothing granted yet");
    assert_eq!(l.settle(1), 1, "the first request had no grant");
    l.grant(3, Some(100));
    assert_eq!(l.generation, 1);
    assert!(!l.renew(50));
    assert_eq!(l.settle(2), 0);
    assert!(!l.renew(50));
    assert_eq!(l.settle(4), 3, "one left, four reported");
    assert!(l.renew(50));
    l.grant(2, Some(100));
    assert!(l.renew(100), "the window ended");
}

#[test]
fn demands_expire_and_leave_with_their_stream() {
    let mut d = Demands::default();
    d.set(b"a", 1, 5, 0);
    d.set(b"a", 2, 7, 10);
    d.set(b"a", 2, 3, 20);
    assert_eq!(d.others(b"a", 1, 20, 100), 3);
    assert_eq!(d.others(b"a", 2, 20, 100), 5);
    assert_eq!(d.others(b"a", 2, 200, 100), 0, "older than the ttl");
    d.remove(b"a", 1);
    d.remove(b"a", 2);
    assert!(d.is_empty());
}
