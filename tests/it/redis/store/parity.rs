//! The scripts against the in-memory policy: the same state, time and hits give the same
//! verdicts and the same stored state (property tests), HyperLogLog and calendar windows included.

use super::*;

#[derive(Clone, Debug)]
struct CheckSpec {
    key: usize,
    requests: u64,
    /// Picks the burst of a bucket (see [`Scenario::limit`]).
    param: usize,
    hits: u64,
    /// distinct: which of a few values.
    value: u8,
    refund: bool,
    always: bool,
    group: u32,
}

#[derive(Clone, Debug)]
struct Step {
    dt: Micros,
    quota: [bool; 3],
    checks: Vec<CheckSpec>,
}

/// One parity timeline family: three keys, each with its algorithm, window and layout.
struct Scenario {
    name: &'static str,
    keys: [KeySpec; 3],
    /// The three keys are limits of one descriptor (`rate_limits`, named), not three
    /// descriptors.
    one_descriptor: bool,
    /// Added to every requests_per_unit (distinct above 1000 is a HyperLogLog).
    requests_base: u64,
    /// Time steps are drawn up to this long (and back up to a tenth of it).
    max_dt: Micros,
    start: Micros,
    /// Checks per request are drawn below this (2: one check, `fixed_window.lua`'s case).
    max_checks: usize,
    /// Every check a plain take: no refund, no charge-always, no quota mode, hits >= 1
    /// (`batch.lua`'s one-HINCRBY-per-check path for fixed_window).
    plain: bool,
    /// Each key at most once per request (`batch.lua`'s short layout for plain fixed_window
    /// takes), and `Some(true)`: check i in group i (a descriptor each).
    distinct: Option<bool>,
}

#[derive(Clone, Copy)]
struct KeySpec {
    algorithm: Algorithm,
    window: Micros,
    precision: u32,
    calendar: Option<Calendar>,
}

const fn spec(algorithm: Algorithm, window: Micros) -> KeySpec {
    KeySpec {
        algorithm,
        window,
        precision: 10,
        calendar: None,
    }
}

impl Scenario {
    fn limit(&self, key: usize, requests: u64, param: usize) -> Limit {
        let k = self.keys[key];
        let requests = self.requests_base + requests;
        let l = Limit::new(k.algorithm, requests, k.window).unwrap();
        let l = match k.algorithm.param() {
            Some(Param::Precision) => l.with_precision(k.precision),
            Some(Param::Calendar) => k.calendar.map_or(Ok(l.clone()), |c| l.with_calendar(c)),
            Some(Param::Burst) if requests > 0 => l.with_burst([requests, 1, 3, 7][param]),
            _ => Ok(l),
        };
        l.unwrap()
    }
}

fn scenarios() -> Vec<Scenario> {
    use Algorithm::*;
    let each = |name, a: Algorithm| Scenario {
        name,
        keys: [spec(a, 10 * SEC), spec(a, 60 * SEC), spec(a, 3 * SEC)],
        one_descriptor: false,
        requests_base: 0,
        max_dt: 70 * SEC,
        start: T0 + 7_654_321,
        max_checks: 6,
        plain: false,
        distinct: None,
    };
    let tz = |unit, tz| Some(Calendar { unit, tz });
    let mut sliding = each("sliding_window", SlidingWindow);
    sliding.keys[0].precision = 5;
    sliding.keys[1].precision = 1;
    sliding.keys[2].precision = 100;
    // One check or two: sliding_window.lua and batch.lua take turns on the same counts.
    let sliding_fast = Scenario {
        max_checks: 3,
        name: "sliding_window (fast path)",
        keys: sliding.keys,
        ..each("", SlidingWindow)
    };
    vec![
        each("fixed_window", FixedWindow),
        // One check or two: fixed_window.lua and batch.lua take turns on the same keys.
        Scenario {
            max_checks: 3,
            ..each("fixed_window (fast path)", FixedWindow)
        },
        // Plain takes of several checks, often the same key twice: batch.lua's HINCRBY per
        // check when all are allowed, given back (and the policy run) when one is not.
        Scenario {
            plain: true,
            ..each("fixed_window (plain takes of several checks)", FixedWindow)
        },
        Scenario {
            plain: true,
            one_descriptor: true,
            ..each(
                "fixed_window (plain takes, several limits of one descriptor)",
                FixedWindow,
            )
        },
        // Plain takes of distinct keys: batch.lua's short layout, its HINCRBY per check, a
        // key's first take of a window, and the general path when one is rejected or a key
        // holds a later window (time steps back).
        Scenario {
            plain: true,
            distinct: Some(true),
            ..each("fixed_window (plain takes, a descriptor each)", FixedWindow)
        },
        Scenario {
            plain: true,
            distinct: Some(false),
            ..each(
                "fixed_window (plain takes of distinct keys, groups drawn)",
                FixedWindow,
            )
        },
        sliding,
        sliding_fast,
        each("sliding_log", SlidingLog),
        // One check or two: sliding_log.lua and batch.lua take turns on the same sorted sets.
        Scenario {
            max_checks: 3,
            ..each("sliding_log (fast path)", SlidingLog)
        },
        each("token_bucket", TokenBucket),
        // One check or two: bucket.lua and batch.lua take turns on the same meters.
        Scenario {
            max_checks: 3,
            ..each("token_bucket (fast path)", TokenBucket)
        },
        each("leaky_bucket", LeakyBucket),
        Scenario {
            max_checks: 3,
            ..each("leaky_bucket (fast path)", LeakyBucket)
        },
        each("gcra", Gcra),
        Scenario {
            max_checks: 3,
            ..each("gcra (fast path)", Gcra)
        },
        each("distinct", Distinct),
        Scenario {
            requests_base: 1_001,
            ..each("distinct (HyperLogLog)", Distinct)
        },
        each("concurrency", Concurrency),
        Scenario {
            name: "concurrency (leases of odd lengths, often expiring)",
            keys: [
                spec(Concurrency, 1_234_567),
                spec(Concurrency, 999),
                spec(Concurrency, 7 * SEC),
            ],
            max_dt: 5 * SEC,
            ..each("", Concurrency)
        },
        Scenario {
            name: "concurrency beside other limits of one descriptor",
            keys: [
                spec(Concurrency, 5 * SEC),
                spec(FixedWindow, 10 * SEC),
                spec(TokenBucket, 60 * SEC),
            ],
            one_descriptor: true,
            ..each("", FixedWindow)
        },
        Scenario {
            name: "calendar windows",
            keys: [
                KeySpec {
                    calendar: tz(Unit::Hour, chrono_tz::Asia::Kolkata),
                    ..spec(FixedWindow, 3_600 * SEC)
                },
                KeySpec {
                    calendar: tz(Unit::Day, chrono_tz::America::New_York),
                    ..spec(FixedWindow, 86_400 * SEC)
                },
                KeySpec {
                    calendar: tz(Unit::Hour, chrono_tz::Asia::Kathmandu),
                    ..spec(Distinct, 3_600 * SEC)
                },
            ],
            one_descriptor: false,
            requests_base: 0,
            max_dt: 3 * 3_600 * SEC,
            // 2023-11-05 03:00 UTC: New York's 25-hour day starts an hour later.
            start: 1_699_153_200 * SEC + 1_234_567,
            max_checks: 6,
            plain: false,
            distinct: None,
        },
        // A sliding_log beside fixed windows of one descriptor, plain takes of distinct keys:
        // batch.lua's short layout with the log decided by sliding_log.lua's function, and
        // the general path when one is rejected.
        Scenario {
            name: "a sliding_log beside fixed windows of one descriptor",
            keys: [
                spec(SlidingLog, 5 * SEC),
                spec(FixedWindow, 60 * SEC),
                spec(FixedWindow, 10 * SEC),
            ],
            one_descriptor: true,
            plain: true,
            distinct: Some(true),
            ..each("", FixedWindow)
        },
        Scenario {
            name: "rate_limits (several limits of one descriptor)",
            keys: [
                spec(SlidingLog, 5 * SEC),
                spec(Gcra, 60 * SEC),
                KeySpec {
                    precision: 4,
                    ..spec(SlidingWindow, 20 * SEC)
                },
            ],
            one_descriptor: true,
            ..each("", FixedWindow)
        },
    ]
}

fn step_strategy(
    max_dt: Micros,
    max_checks: usize,
    plain: bool,
    distinct: Option<bool>,
) -> impl Strategy<Value = Step> {
    let check = (
        (0..3usize, 0..6u64, 0..4usize),
        prop_oneof![3 => 0..3u64, 1 => 3..10u64],
        0..5u8,
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.25),
        0..3u32,
    )
        .prop_map(
            move |((key, requests, param), hits, value, refund, always, group)| CheckSpec {
                key,
                requests,
                param,
                hits: if plain { hits.max(1) } else { hits },
                value,
                refund: refund && !plain,
                always: always && !plain,
                group,
            },
        );
    let dt = prop_oneof![
        3 => Just(0),
        3 => 1..1_000i64,
        3 => 1..max_dt,
        1 => -(max_dt / 10)..0,
    ];
    (
        dt,
        prop::array::uniform3(prop::bool::weighted(0.3)),
        prop::collection::vec(check, 1..max_checks),
    )
        .prop_map(move |(dt, quota, mut checks)| {
            if let Some(in_order) = distinct {
                let mut seen = [false; 3];
                checks.retain(|c| !std::mem::replace(&mut seen[c.key], true));
                if in_order {
                    for (i, c) in checks.iter_mut().enumerate() {
                        c.group = i as u32;
                    }
                }
            }
            Step {
                dt,
                quota: if plain { [false; 3] } else { quota },
                checks,
            }
        })
}

/// Cases per scenario: every scenario shares the < 60 s the Redis parity tests may take.
const PARITY_CASES: u32 = 64;

/// One case's limits, keys and distinct values: what turns a [`Step`]'s checks into
/// [`Check`]s.
struct Case {
    limits: Vec<Vec<Vec<Limit>>>,
    keys: Vec<Vec<u8>>,
    values: Vec<u64>,
}

impl Case {
    /// Fresh keys under `prefix`: cases never see each other's state.
    fn new(scenario: &Scenario, prefix: &str) -> Case {
        let limits: Vec<Vec<Vec<Limit>>> = (0..3)
            .map(|k| {
                (0..6)
                    .map(|r| (0..4).map(|p| scenario.limit(k, r, p)).collect())
                    .collect()
            })
            .collect();
        let keys: Vec<Vec<u8>> = (0..3)
            .map(|k| {
                let l = &limits[k][1][0];
                if scenario.one_descriptor {
                    named_key_of(prefix, "one", l, ["a", "b", "c"][k])
                } else {
                    key_of(prefix, &format!("v{k}"), l)
                }
            })
            .collect();
        let values: Vec<u64> = (0..5)
            .map(|v| distinct::hash(format!("10.0.0.{v}").as_bytes()))
            .collect();
        Case {
            limits,
            keys,
            values,
        }
    }

    fn checks(&self, step: &Step) -> Vec<Check<'_>> {
        step.checks
            .iter()
            .map(|c| {
                let limit = &self.limits[c.key][c.requests as usize][c.param];
                Check {
                    key: &self.keys[c.key],
                    limit,
                    ask: Ask {
                        hits: c.hits,
                        refund: c.refund,
                        value: if limit.algorithm().counts_values() {
                            self.values[c.value as usize]
                        } else {
                            0
                        },
                        dry_run: false,
                    },
                    charge: if c.always {
                        Charge::Always
                    } else {
                        Charge::IfAdmitted
                    },
                    group: c.group,
                    quota: step.quota[c.group as usize],
                    on_error: None,
                }
            })
            .collect()
    }
}

fn runner(name: &'static str) -> TestRunner {
    TestRunner::new(ProptestConfig {
        cases: PARITY_CASES,
        failure_persistence: crate::support::seeds::regressions(name),
        ..ProptestConfig::default()
    })
}

/// Each request as one `FCALL` of its own on the shared pool.
#[test]
fn lua_script_matches_the_in_memory_policy() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let redis = RedisNode::start();
    let store = rt.block_on(connected(options(&redis.url(), ClockSource::Local)));
    let case = AtomicU64::new(0);
    for scenario in scenarios() {
        let mut runner = runner("lua_script_matches_the_in_memory_policy");
        let timeline = prop::collection::vec(
            step_strategy(
                scenario.max_dt,
                scenario.max_checks,
                scenario.plain,
                scenario.distinct,
            ),
            1..12,
        );
        let result = runner.run(&timeline, |steps| {
            let c = Case::new(
                &scenario,
                &format!("parity{}:", case.fetch_add(1, Ordering::Relaxed)),
            );
            let mut table = MapTable::default();
            let mut now = scenario.start;
            for (i, step) in steps.iter().enumerate() {
                now += step.dt;
                let checks = c.checks(step);
                let want = batch::decide(&mut table, &checks, now);
                let got = rt
                    .block_on(store.decide_checks(&checks, now, Deadline::NONE))
                    .map_err(|e| TestCaseError::fail(format!("redis: {e}")))?;
                prop_assert_eq!(got, want, "step {} at {}: {:?}", i, now, step);
            }
            Ok(())
        });
        if let Err(e) = result {
            panic!("{}: {e}", scenario.name);
        }
    }
}

/// A serving thread's own connection with the function library: the requests of one tick
/// (1 to 4, each of 1 to 5 checks, on the same keys) leave as one `FCALL` (of their script
/// alone, or of `batch`), decided in queue order: the same verdicts as deciding them one after
/// another in memory.
#[test]
fn batched_function_calls_match_the_in_memory_policy() {
    let redis = RedisNode::start();
    let (rt, store) =
        redis_support::on_a_serving_thread(&redis, options(&redis.url(), ClockSource::Local));
    let (fcalls, ticks_run) = (AtomicU64::new(0), AtomicU64::new(0));
    let case = AtomicU64::new(0);
    for scenario in scenarios() {
        let mut runner = runner("batched_function_calls_match_the_in_memory_policy");
        let tick = prop::collection::vec(
            step_strategy(
                scenario.max_dt,
                scenario.max_checks,
                scenario.plain,
                scenario.distinct,
            ),
            1..5,
        );
        let timeline = prop::collection::vec(tick, 1..8);
        let result = runner.run(&timeline, |ticks| {
            let c = Case::new(
                &scenario,
                &format!("batched{}:", case.fetch_add(1, Ordering::Relaxed)),
            );
            let mut table = MapTable::default();
            let mut now = scenario.start;
            for (i, tick) in ticks.iter().enumerate() {
                now += tick[0].dt;
                let requests_checks: Vec<Vec<Check<'_>>> =
                    tick.iter().map(|s| c.checks(s)).collect();
                let before = redis.command_calls("fcall");
                let got = rt.block_on(futures::future::join_all(
                    requests_checks
                        .iter()
                        .map(|checks| store.decide_checks(checks, now, Deadline::NONE)),
                ));
                fcalls.fetch_add(redis.command_calls("fcall") - before, Ordering::Relaxed);
                ticks_run.fetch_add(1, Ordering::Relaxed);
                for (j, (checks, got)) in requests_checks.iter().zip(got).enumerate() {
                    let want = batch::decide(&mut table, checks, now);
                    let got = got.map_err(|e| TestCaseError::fail(format!("redis: {e}")))?;
                    prop_assert_eq!(got, want, "tick {} request {} at {}: {:?}", i, j, now, tick);
                }
            }
            Ok(())
        });
        if let Err(e) = result {
            panic!("{}: {e}", scenario.name);
        }
    }
    // Every tick was one FCALL, whatever its number of requests.
    assert_eq!(fcalls.into_inner(), ticks_run.into_inner());
    assert_eq!(redis.command_calls("evalsha"), 0);
}

/// A HyperLogLog-mode distinct limit filled past its limit, 100 values per request (the same
/// key 100 times in one request): the Lua estimate equals Rust's at every step, so the window
/// closes on the same request, and then refuses values seen before too.
#[test]
fn distinct_hyperloglog_closes_on_the_same_request_as_rust() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let redis = RedisNode::start();
    let store = rt.block_on(connected(options(&redis.url(), ClockSource::Local)));
    let limit = Limit::new(Algorithm::Distinct, 1_200, 3_600 * SEC).unwrap();
    assert!(limit.is_approximate());
    let key = key_of("hll:", "x", &limit);
    let mut table = MapTable::default();
    let mut closed_at = None;
    for round in 0..16u32 {
        let checks: Vec<Check<'_>> = (0..100u32)
            .map(|i| Check {
                ask: Ask {
                    value: distinct::hash(&(round * 100 + i).to_le_bytes()),
                    ..Ask::take(1)
                },
                ..take(&key, &limit, 1, i)
            })
            .collect();
        let want = batch::decide(&mut table, &checks, T0);
        let got = rt
            .block_on(store.decide_checks(&checks, T0, Deadline::NONE))
            .unwrap();
        assert_eq!(got, want, "round {round}");
        if closed_at.is_none() && got.iter().any(|v| !v.allowed) {
            closed_at = Some(round);
        }
    }
    assert!(closed_at.is_some(), "1 600 values close a limit of 1 200");
    let seen = [Check {
        ask: Ask {
            value: distinct::hash(&0u32.to_le_bytes()),
            ..Ask::take(1)
        },
        ..take(&key, &limit, 1, 0)
    }];
    let v = rt
        .block_on(store.decide_checks(&seen, T0, Deadline::NONE))
        .unwrap();
    assert!(!v[0].allowed, "a closed HyperLogLog refuses every value");
    let stored = redis.cli(&["STRLEN", std::str::from_utf8(&key).unwrap()]);
    let len: usize = stored.parse().unwrap();
    assert!(
        len > 16_384 && len < 16_384 + 200,
        "registers + header: {len}"
    );
}

/// The HyperLogLog estimate, bit for bit, over register states far beyond what a test can fill
/// value by value (the raw estimate, not only linear counting): a state written in the
/// script's layout (ALGORITHMS.md) and the same state in memory, looked at with a limit so
/// large that `remaining` is `limit - estimate`.
#[test]
fn distinct_hyperloglog_estimate_is_bit_exact() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let redis = RedisNode::start();
    let store = rt.block_on(connected(options(&redis.url(), ClockSource::Local)));
    let limit = Limit::new(Algorithm::Distinct, u64::from(u32::MAX), 3_600 * SEC).unwrap();
    let window_start = T0 - T0 % (3_600 * SEC);
    // A plain client writes the states (binary) the script then reads.
    let client = {
        let _rt = rt.enter();
        sluice::store::redis::PipelinedConnection::connect(
            &sluice::store::redis::ConnectOptions::for_url(redis.url()),
        )
        .unwrap()
    };
    rt.block_on(async {
        while !client.is_up() {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    });
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 64,
        failure_persistence: crate::support::seeds::regressions(
            "distinct_hyperloglog_estimate_is_bit_exact",
        ),
        ..ProptestConfig::default()
    });
    let case = AtomicU64::new(0);
    runner
        .run(
            &(any::<u64>(), 0..101u64, 0..40u32, 0..3u32),
            |(seed, zero_pct, offset, spread)| {
                // Registers: some zero, the others 1 + a geometric draw shifted by `offset`.
                let mut x = seed | 1;
                let mut next = || {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x
                };
                let regs: Vec<u8> = (0..16_384)
                    .map(|_| {
                        if next() % 100 < zero_pct {
                            0
                        } else {
                            let r = 1 + offset + (next().leading_zeros() >> spread);
                            r.min(51) as u8
                        }
                    })
                    .collect();
                let key = key_of(
                    &format!("est{}:", case.fetch_add(1, Ordering::Relaxed)),
                    "x",
                    &limit,
                );
                let mut ranks = [0u32; 52];
                regs.iter().for_each(|&r| ranks[usize::from(r)] += 1);
                let mut raw = format!("h {window_start}").into_bytes();
                for n in ranks {
                    raw.extend_from_slice(format!(" {n}").as_bytes());
                }
                raw.push(b'\n');
                raw.extend_from_slice(&regs);
                {
                    use sluice::store::redis::resp::{Frame, Value};
                    let args = [Value::from(key.clone()), Value::from(raw.clone())];
                    let set =
                        rt.block_on(client.call("SET", &args, std::time::Duration::from_secs(5)));
                    if !matches!(set, Ok(Frame::Simple(_))) {
                        return Err(TestCaseError::fail(format!("SET: {set:?}")));
                    }
                }
                let mut table = MapTable::default();
                table.0.insert(
                    key.clone(),
                    State::Distinct(distinct::State {
                        window_start,
                        values: distinct::Values::Hll(regs.into_boxed_slice()),
                    }),
                );
                let look = [Check {
                    ask: Ask {
                        value: seed,
                        ..Ask::peek()
                    },
                    ..take(&key, &limit, 0, 0)
                }];
                let want = batch::decide(&mut table, &look, T0);
                let got = rt
                    .block_on(store.decide_checks(&look, T0, Deadline::NONE))
                    .map_err(|e| TestCaseError::fail(format!("redis: {e}")))?;
                prop_assert_eq!(got, want);
                Ok(())
            },
        )
        .unwrap();
}

/// With the Redis clock, calendar windows are computed by sluice (the tz database) around its
/// own clock: a Redis clock an hour away from it still counts in Redis' own hour.
#[test]
fn calendar_windows_follow_the_redis_clock() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let redis = RedisNode::start();
    let store = rt.block_on(connected(options(&redis.url(), ClockSource::Redis)));
    let limit = Limit::fixed_window(5, 3_600 * SEC).unwrap();
    let limit = limit
        .with_calendar(Calendar {
            unit: Unit::Hour,
            tz: chrono_tz::Asia::Kolkata,
        })
        .unwrap();
    let redis_now = || -> Micros {
        let t = redis.cli(&["TIME"]);
        let mut it = t.lines().map(|l| l.trim().parse::<i64>().unwrap());
        it.next().unwrap() * SEC + it.next().unwrap()
    };
    for (i, skew) in [-3_600 * SEC, 0, 3_600 * SEC].into_iter().enumerate() {
        let key = key_of("cal:", &format!("x{i}"), &limit);
        let c = [take(&key, &limit, 1, 0)];
        let before = redis_now();
        let v = rt
            .block_on(store.decide_checks(&c, before + skew, Deadline::NONE))
            .unwrap();
        let after = redis_now();
        assert!(v[0].allowed && v[0].remaining == 4, "{v:?}");
        let stored = redis.cli(&["HGETALL", std::str::from_utf8(&key).unwrap()]);
        let (start, _) = crate::support::redis::fixed_window_state(&stored).expect("a window");
        // Kolkata's hours start at :30 UTC; an hour boundary may pass during the call.
        let starts = [
            limit.frame(before).window_start,
            limit.frame(after).window_start,
        ];
        assert!(
            starts.contains(&start),
            "skew {skew}: {stored} not in {starts:?}"
        );
        assert_eq!(start % (1_800 * SEC), 0);
        assert_ne!(start % (3_600 * SEC), 0);
    }
}

// ---------------------------------------------------------------------------------------------
// Round trips and sharing.
// ---------------------------------------------------------------------------------------------

/// The library's `batch` reads Redis' clock once for the decisions that ask for it, to the
/// microsecond (as each script does alone), and hands every one of them the same time.
#[test]
fn a_batch_on_the_redis_clock_decides_at_one_exact_instant() {
    use sluice::store::redis::library::LIBRARY;
    let redis = with_library();
    let time = || redis_now(&redis);
    // Two fixed_window decisions (script code 2, then its ARGV: now '', limit, window, hits,
    // mode), on keys a and b.
    let sub = ["2", "", "10", "60000000", "1", "0"];
    let mut exact = 0;
    for _ in 0..5 {
        let before = time();
        let mut args = vec!["FCALL", LIBRARY.batch(), "2", "a", "b", "2"];
        args.extend(sub);
        args.extend(sub);
        let reply = redis.cli(&args);
        let after = time();
        // The batch's clock, then each decision's flags, remaining and reset.
        let ints: Vec<Micros> = reply
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        assert_eq!(ints.len(), 7, "{reply}");
        let nows = [ints[0]];
        assert_eq!(ints[3], ints[6], "one instant, so one reset: {reply}");
        assert_eq!(ints[3], 60 * SEC - ints[0] % (60 * SEC), "{reply}");
        assert!(
            (before..=after).contains(&nows[0]),
            "{before} {nows:?} {after}"
        );
        if nows[0] % 100 != 0 {
            exact += 1;
        }
    }
    // Rounded to 100 us (what `tostring` of a time does), all five would be multiples of 100.
    assert!(exact > 0, "the time was rounded");
}

/// A repeat (`=`) is decided with the values of the fast decision before it in its batch,
/// which fixed_window keeps in the library between calls: when that decision failed before
/// keeping them, its repeat fails as it did, and never decides with the values an earlier
/// batch left behind.
#[test]
fn a_repeat_of_a_failed_decision_fails_as_it_did() {
    use sluice::store::redis::library::LIBRARY;
    let redis = with_library();
    // fixed_window (script code 2): now, limit, window, hits, mode.
    let good = ["2", "1000000000", "10", "60000000", "1", "0"];
    // A window that is no number fails before anything is written or kept.
    let unreadable = ["2", "1000000000", "10", "x", "1", "0"];
    let batch = |keys: &[&str], decisions: &[&str]| {
        let (nkeys, count) = (keys.len().to_string(), keys.len().to_string());
        let mut args = vec!["FCALL", LIBRARY.batch(), &nkeys];
        args.extend(keys);
        args.push(&count);
        args.extend(decisions);
        redis.cli(&args)
    };
    // The batch's clock (0: none read), then flags 3 (allowed, charged), remaining, reset.
    assert_eq!(batch(&["a"], &good), "0\n3\n9\n20000000");
    let mut decisions = unreadable.to_vec();
    decisions.push("=");
    let reply = batch(&["a", "b"], &decisions);
    assert_eq!(reply.matches("ERR").count(), 2, "{reply}");
    assert_eq!(
        redis.cli(&["EXISTS", "b"]),
        "0",
        "the repeat decided: {reply}"
    );
    // And a repeat of a decision that succeeded is that decision on its own key.
    let mut decisions = good.to_vec();
    decisions.push("=");
    assert_eq!(
        batch(&["a", "b"], &decisions),
        "0\n3\n8\n20000000\n3\n9\n20000000"
    );
}
