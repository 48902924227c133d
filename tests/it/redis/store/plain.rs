//! Plain takes (`src/store/redis/plain.rs`): a one-hit fixed_window take on the Redis clock,
//! of a key the thread's connection saw charged in the current window, goes as one `HINCRBY`
//! after the write's `TIME`, with no script. The limit stays exact across window edges, a key
//! deleted meanwhile is settled, nothing is left to give back (a key at its limit is read with
//! `HGET`, not counted; the count stays exact with connections killed under rejected load), a
//! refund reopens a full key, and the library's
//! `fixed_window_mend` (what decides the takes a reply alone cannot) agrees with the script.

use super::*;
use sluice::clock::{Clock, SystemClock};
use sluice::store::redis::library::LIBRARY;
use sluice::store::Verdict;

/// Ticks of 8 concurrent one-hit takes of `limit` (1 s windows) on one key until 5 windows
/// have been seen, so the middle ones were hammered from their first microsecond to their
/// last, over their edges: each answer by window (its end, to the nearest second: this
/// machine's clock is Redis'), and the `FCALL`s Redis ran meanwhile.
fn hammer_windows(prefix: &str, limit: u64) -> (Vec<(i64, Vec<Verdict>)>, u64) {
    let redis = RedisNode::start();
    let (rt, store) =
        redis_support::on_a_serving_thread(&redis, options(&redis.url(), ClockSource::Redis));
    let limit = Limit::fixed_window(limit, SEC).unwrap();
    let key = key_of(prefix, "x", &limit);
    let mut answers: std::collections::BTreeMap<i64, Vec<Verdict>> = Default::default();
    let fcalls = redis.command_calls("fcall");
    let start = crate::support::poll::real_now();
    while answers.len() < 5 {
        assert!(
            crate::support::poll::real_since(start) < Duration::from_secs(30),
            "5 windows in 30 s"
        );
        let checks = [take(&key, &limit, 1, 0)];
        let got = rt.block_on(futures::future::join_all(
            (0..8).map(|_| store.decide_checks(&checks, 0, Deadline::NONE)),
        ));
        let local = SystemClock.now();
        for v in got {
            let v = v.unwrap().remove(0);
            let window = (local + v.reset + SEC / 2) / SEC;
            answers.entry(window).or_default().push(v);
        }
    }
    let fcalls = redis.command_calls("fcall") - fcalls;
    (answers.into_iter().collect(), fcalls)
}

#[test]
fn plain_takes_admit_exactly_the_limit_in_each_window_across_its_edges() {
    const LIMIT: u64 = 20;
    let (windows, fcalls) = hammer_windows("plain-edges:", LIMIT);
    let admitted: Vec<u64> = windows
        .iter()
        .map(|(_, vs)| vs.iter().filter(|v| v.allowed).count() as u64)
        .collect();
    assert_eq!(
        admitted[1..4],
        [LIMIT; 3],
        "admitted per window: {admitted:?}"
    );
    let decisions: usize = windows.iter().map(|(_, vs)| vs.len()).sum();
    assert!(
        (fcalls as usize) * 4 < decisions,
        "most takes go plain: {fcalls} FCALLs for {decisions} decisions"
    );
}

/// Below the limit, each window's answers must count 1, 2, 3, ... once each: a hit counted
/// in one window but answered for another (a take sent across an edge) would repeat or skip
/// a count.
#[test]
fn plain_takes_count_each_hit_once_in_the_window_they_are_answered_for() {
    const LIMIT: u64 = 1_000_000;
    let (windows, _) = hammer_windows("plain-counts:", LIMIT);
    for (window, vs) in &windows[1..4] {
        assert!(vs.iter().all(|v| v.allowed && v.charged), "{vs:?}");
        let mut c: Vec<u64> = vs.iter().map(|v| LIMIT - v.remaining).collect();
        c.sort_unstable();
        let n = c.len() as u64;
        assert_eq!(c, (1..=n).collect::<Vec<_>>(), "window ending {window} s");
    }
}

#[test]
fn a_plain_take_on_a_key_deleted_meanwhile_settles_its_window() {
    let redis = RedisNode::start();
    let (rt, store) =
        redis_support::on_a_serving_thread(&redis, options(&redis.url(), ClockSource::Redis));
    let limit = Limit::fixed_window(10, 86_400 * SEC).unwrap();
    let key = key_of("plain-settle:", "x", &limit);
    let checks = [take(&key, &limit, 1, 0)];
    let decide = || {
        rt.block_on(store.decide_checks(&checks, 0, Deadline::NONE))
            .unwrap()[0]
    };
    // The first take is the script's; the second goes plain.
    assert_eq!(decide().remaining, 9);
    let fcalls = redis.command_calls("fcall");
    assert_eq!(decide().remaining, 8);
    assert_eq!(redis.command_calls("fcall"), fcalls, "a plain take");

    // Deleted behind sluice's back (as by eviction, or another server after a failover).
    redis.cli(&["DEL", std::str::from_utf8(&key).unwrap()]);
    let v = decide();
    assert!(v.allowed && v.charged && v.remaining == 9, "{v:?}");
    let f = fields(&redis, &key);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].1, "2", "one counted (count + 1)");
    let ttl: i64 = redis
        .cli(&["PTTL", std::str::from_utf8(&key).unwrap()])
        .parse()
        .unwrap();
    assert!(ttl > 0 && ttl <= 86_401_000, "the key expires: {ttl}");
}

/// A key at its limit is peeked: its takes are rejected from one `HGET` each, with no script
/// and nothing written; after a refund makes room, the next take finds it and is decided (and
/// charged) by the script, exactly.
#[test]
fn a_key_at_its_limit_is_rejected_by_a_read_and_a_refund_reopens_it() {
    let redis = RedisNode::start();
    let (rt, store) =
        redis_support::on_a_serving_thread(&redis, options(&redis.url(), ClockSource::Redis));
    let limit = Limit::fixed_window(2, 86_400 * SEC).unwrap();
    let key = key_of("plain-reject:", "x", &limit);
    let checks = [take(&key, &limit, 1, 0)];
    let decide = |checks: &[Check<'_>]| {
        rt.block_on(store.decide_checks(checks, 0, Deadline::NONE))
            .unwrap()[0]
    };
    assert!(decide(&checks).allowed);
    let fcalls = redis.command_calls("fcall");
    let v = decide(&checks);
    assert!(v.allowed && v.remaining == 0, "{v:?}");
    assert_eq!(redis.command_calls("fcall"), fcalls, "a plain take");
    let (hincrbys, hgets) = (redis.command_calls("hincrby"), redis.command_calls("hget"));
    for _ in 0..3 {
        let v = decide(&checks);
        assert!(!v.allowed && !v.charged && v.remaining == 0, "{v:?}");
        assert!(v.reset > 0 && v.reset <= 86_400 * SEC, "{v:?}");
    }
    assert_eq!(redis.command_calls("fcall"), fcalls, "no script");
    assert_eq!(redis.command_calls("hget"), hgets + 3, "one read each");
    assert_eq!(
        redis.command_calls("hincrby"),
        hincrbys,
        "nothing written, so nothing to give back"
    );
    assert_eq!(
        fields(&redis, &key)[0].1,
        "3",
        "the count at the limit (2, stored as 3)"
    );

    // A refund of one hit (its own script call) makes room: the next take reads a count below
    // the limit, so the script decides it, and charges it; then the key is full again.
    let refund = [Check::new(&key, &limit, Ask::refund(1))];
    assert!(decide(&refund).allowed);
    assert_eq!(fields(&redis, &key)[0].1, "2");
    let v = decide(&checks);
    assert!(v.allowed && v.charged && v.remaining == 0, "{v:?}");
    assert_eq!(fields(&redis, &key)[0].1, "3");
    let v = decide(&checks);
    assert!(!v.allowed && !v.charged, "{v:?}");
    assert_eq!(fields(&redis, &key)[0].1, "3", "exactly the limit");
}

/// `fixed_window_mend`, called as sluice calls it, on states a plain take leaves.
#[test]
fn mend_gives_back_or_settles_then_decides_as_the_script() {
    let redis = with_library();
    let day = 86_400 * SEC;
    let mend = |key: &str, what: &str, field: i64| -> Vec<i64> {
        redis
            .cli(&[
                "FCALL",
                LIBRARY.mend(),
                "1",
                key,
                what,
                &field.to_string(),
                "10",
                &day.to_string(),
            ])
            .lines()
            .map(|l| l.trim().parse().unwrap())
            .collect()
    };
    let now = redis_now(&redis);
    let ws = now - now % day;

    // Each case: the key's fields before, what, the field sent for; the take's remaining, and
    // the one field after.
    type Case<'a> = (
        &'a str,
        Vec<(i64, &'a str)>,
        &'a str,
        i64,
        i64,
        Vec<(i64, &'a str)>,
    );
    let cases: [Case<'_>; 5] = [
        // decide: a peek that found room (nothing was written): the take, as the script.
        (
            "mend:decide",
            vec![(ws, "3")],
            "decide",
            ws,
            7,
            vec![(ws, "4")],
        ),
        // retake: a hit counted in the window before Redis' (a clock read across the edge) is
        // given back (its field, at 0, is dropped), and the take decided in Redis' window.
        (
            "mend:retake",
            vec![(ws - day, "1")],
            "retake",
            ws - day,
            9,
            vec![(ws, "2")],
        ),
        // Where the window before held other hits too, only this one is given back: that
        // window is over, and the take starts Redis' window (the window before kept as a
        // superseded mark, expiry.lua).
        (
            "mend:retake2",
            vec![(ws - day, "5")],
            "retake",
            ws - day,
            9,
            vec![(ws, "2"), (ws - day, SUPERSEDED)],
        ),
        // settle: the take made its window's mark (1) on a key holding two earlier windows
        // and no expiry, and two more takes counted on it meanwhile: the window before is
        // superseded (a take still counting in it goes to the script, not to a fresh count),
        // the older one goes, the expiry is set, and this take counts as the third.
        (
            "mend:settle",
            vec![(ws - 2 * day, SUPERSEDED), (ws - day, "7"), (ws, "3")],
            "settle",
            ws,
            7,
            vec![(ws, "4"), (ws - day, SUPERSEDED)],
        ),
        // settle where a later window was written (a sluice on its own clock, ahead): the
        // later window wins, as in fixed_window.lua, and the take counts there; the take's own
        // window is superseded, not dropped (takes may still count in it).
        (
            "mend:later",
            vec![(ws + day, "3"), (ws, "1")],
            "settle",
            ws,
            7,
            vec![(ws + day, "4"), (ws, SUPERSEDED)],
        ),
    ];
    for (k, before, what, field, remaining, after) in cases {
        for (f, v) in before {
            redis.cli(&["HSET", k, &f.to_string(), v]);
        }
        let r = mend(k, what, field);
        assert_eq!(r[1..3], [3, remaining], "{k}: {r:?}");
        let want: Vec<(String, String)> = after
            .iter()
            .map(|(f, v)| (f.to_string(), v.to_string()))
            .collect();
        assert_eq!(fields(&redis, k.as_bytes()), want, "{k}");
    }
    let k = "mend:settle";
    let ttl: i64 = redis.cli(&["PTTL", k]).parse().unwrap();
    assert!(ttl > 0 && ttl <= 86_401_000, "{ttl}");

    // settle where a later window was written (a sluice on its own clock, ahead): the later
    // window wins, as in fixed_window.lua, and the take counts there.
    let k = "mend:later";
    redis.cli(&["HSET", k, &(ws + day).to_string(), "3"]);
    redis.cli(&["HSET", k, &ws.to_string(), "1"]);
    let r = mend(k, "settle", ws);
    assert_eq!(r[1..3], [3, 7], "{r:?}");
    assert_eq!(
        fields(&redis, k.as_bytes()),
        vec![
            ((ws + day).to_string(), "4".to_string()),
            (ws.to_string(), SUPERSEDED.to_string())
        ]
    );

    // forget: a settle cut off by a dropped connection, sent on the next one: settle's
    // housekeeping alone (the earlier window superseded, the expiry set), nothing decided.
    let k = "mend:forget";
    redis.cli(&["HSET", k, &(ws - day).to_string(), "4"]);
    redis.cli(&["HSET", k, &ws.to_string(), "3"]);
    assert_eq!(redis.cli(&["PTTL", k]).trim(), "-1", "no expiry yet");
    let r = mend(k, "forget", ws);
    assert_eq!(r[1..], [0, 0, 0], "{r:?}");
    assert_eq!(
        fields(&redis, k.as_bytes()),
        vec![
            (ws.to_string(), "3".to_string()),
            ((ws - day).to_string(), SUPERSEDED.to_string())
        ]
    );
    let ttl: i64 = redis.cli(&["PTTL", k]).parse().unwrap();
    assert!(ttl > 0 && ttl <= 86_401_000, "{ttl}");

    // Anything else is refused, not guessed at.
    let e = redis.cli(&[
        "FCALL",
        LIBRARY.mend(),
        "1",
        "mend:x",
        "what",
        "0",
        "1",
        "1",
    ]);
    assert!(e.contains("unknown mend"), "{e}");
}

/// `fixed_window_mend` against the in-memory fixed_window on random states a plain take
/// leaves: its decision is the algorithm's on the state without the plain take's hit (a
/// retake) or with its window's mark counted as nothing (a settle), at the `now` it reports.
#[test]
fn mend_decides_as_the_in_memory_algorithm() {
    use sluice::algorithm::{fixed_window, Window};
    let redis = with_library();
    let day = 86_400 * SEC;
    let case = AtomicU64::new(0);
    // (retake?, the hit's window before Redis' or not present, the current window's field,
    // a later window's field, limit): fields hold count + 1, so 1 is a bare mark.
    let states = (
        any::<bool>(),
        prop::option::of(1u64..6),
        prop::option::of(1u64..6),
        prop::option::of(1u64..6),
        1u64..6,
    );
    let mut runner = TestRunner::new(ProptestConfig::with_cases(96));
    let result = runner.run(&states, |(retake, before, current, later, limit)| {
        let k = format!("mend:prop{}", case.fetch_add(1, Ordering::Relaxed));
        let now = redis_now(&redis);
        let ws = now - now % day;
        let set = |f: i64, v: u64| {
            redis.cli(&["HSET", &k, &f.to_string(), &v.to_string()]);
        };
        let (what, field, prev) = if retake {
            // The take's hit landed in the window before Redis' (made there if absent).
            set(ws - day, before.unwrap_or(0) + 1);
            if let Some(c) = current {
                set(ws, c);
            }
            let prev = current.map(|c| fixed_window::State {
                window_start: ws,
                count: c - 1,
            });
            ("retake", ws - day, prev)
        } else {
            // The take made the current window's field: its mark, plus takes counted since.
            let c = current.unwrap_or(1);
            set(ws, c);
            if let Some(b) = before {
                set(ws - day, b);
            }
            let prev = match later {
                Some(l) => {
                    set(ws + day, l);
                    fixed_window::State {
                        window_start: ws + day,
                        count: l - 1,
                    }
                }
                None => fixed_window::State {
                    window_start: ws,
                    count: c - 1,
                },
            };
            ("settle", ws, Some(prev))
        };
        let r: Vec<i64> = redis
            .cli(&[
                "FCALL",
                LIBRARY.mend(),
                "1",
                &k,
                what,
                &field.to_string(),
                &limit.to_string(),
                &day.to_string(),
            ])
            .lines()
            .map(|l| l.trim().parse().unwrap())
            .collect();
        let want = fixed_window::evaluate(
            limit,
            prev.as_ref(),
            Window::epoch_aligned(r[0], day),
            Ask::take(1),
        );
        prop_assert_eq!(
            (r[1] & 1 == 1, r[2] as u64, r[3]),
            (want.allowed, want.remaining, want.reset),
            "{} {:?}",
            k,
            (retake, before, current, later, limit)
        );
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Rejected load on one key while the serving thread's connection is killed over and over:
/// nothing is left to give back on a connection (a key at its limit is read, not counted, and
/// a take sent before that was seen is given back by the call that decides it), so the stored
/// count stays exactly the limit.
#[test]
fn the_count_stays_exact_under_rejected_load_with_connections_killed() {
    const LIMIT: u64 = 5;
    let redis = RedisNode::start();
    let (rt, store) =
        redis_support::on_a_serving_thread(&redis, options(&redis.url(), ClockSource::Redis));
    let limit = Limit::fixed_window(LIMIT, 86_400 * SEC).unwrap();
    let key = key_of("plain-killed:", "x", &limit);
    let checks = [take(&key, &limit, 1, 0)];
    let decide = || rt.block_on(store.decide_checks(&checks, 0, Deadline::NONE));
    // Filled in flight, as load reaches a limit: plain takes past it included.
    let got = rt.block_on(futures::future::join_all(
        (0..16).map(|_| store.decide_checks(&checks, 0, Deadline::NONE)),
    ));
    let admitted = got
        .iter()
        .filter(|v| v.as_ref().unwrap()[0].allowed)
        .count();
    assert!(admitted as u64 <= LIMIT, "{admitted}");
    while decide().unwrap()[0].allowed {}
    assert_eq!(fields(&redis, &key)[0].1, (LIMIT + 1).to_string());

    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let killer = {
        let (stop, port) = (stop.clone(), redis.port);
        std::thread::spawn(move || {
            let mut kills = 0;
            while !stop.load(Ordering::Relaxed) {
                let list = redis_support::cli(port, &["CLIENT", "LIST"]);
                for id in list
                    .lines()
                    .filter(|l| l.contains("name=sluice-thread"))
                    .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
                {
                    redis_support::cli(port, &["CLIENT", "KILL", "ID", id]);
                    kills += 1;
                }
                // A cadence for the faults, not a wait for anything.
                std::thread::sleep(Duration::from_millis(20));
            }
            kills
        })
    };
    let mut answered = 0;
    for _ in 0..100 {
        let got = rt.block_on(futures::future::join_all(
            (0..16).map(|_| store.decide_checks(&checks, 0, Deadline::NONE)),
        ));
        for v in got.into_iter().flatten() {
            assert!(!v[0].allowed, "over the limit: {v:?}");
            answered += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let kills = killer.join().unwrap();
    eprintln!("{answered} rejections answered, {kills} connections killed");
    assert!(kills > 0 && answered > 0);
    let f = fields(&redis, &key);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(
        f[0].1,
        (LIMIT + 1).to_string(),
        "the count is the limit, exactly"
    );
}
