use super::*;
use crate::algorithm::Ask;
use crate::store::redis::library::LIBRARY;

#[test]
fn repeated_keys_share_an_index_and_fields_line_up() {
    // The largest limit there is (a limit cannot be built beyond it).
    let l = Limit::fixed_window(u64::from(u32::MAX), 60_000_000).unwrap();
    let mk = |key: &'static [u8], group| Check {
        key,
        limit: &l,
        ask: Ask::take(2),
        charge: Charge::Always,
        group,
        quota: true,
        on_error: None,
    };
    let (a, b, c) = (mk(b"a", 0), mk(b"b", 1), mk(b"a", 2));
    let (keys, args) = encode(&[&a, &b, &c], Scope::All, Some(7), 7);
    assert_eq!(keys, [b"a".as_slice(), b"b".as_slice()]);
    assert_eq!(args.len(), 3 + 3 * FIELDS);
    let ints: Vec<Option<i64>> = args.iter().map(|v| v.as_i64()).collect();
    assert_eq!(ints[1], Some(7));
    // third check: key index 1 again, the largest limit, group 2
    let third = &ints[3 + 2 * FIELDS..];
    assert_eq!(third[0], Some(1));
    assert_eq!(third[2], Some(i64::from(u32::MAX)));
    assert_eq!(third[7], Some(flag::ALWAYS | flag::QUOTA));
    assert_eq!(third[8], Some(2));
}

#[test]
fn plain_fixed_window_takes_of_distinct_keys_take_the_short_layout() {
    let l = Limit::fixed_window(u64::from(u32::MAX), 60_000_000).unwrap();
    let cal = l
        .clone()
        .with_calendar(crate::algorithm::Calendar {
            unit: crate::model::Unit::Hour,
            tz: chrono_tz::UTC,
        })
        .unwrap();
    let log = Limit::new(Algorithm::SlidingLog, 10, 60_000_000).unwrap();
    let mk = |key: &'static [u8], limit, group| Check {
        key,
        limit,
        ask: Ask::take(2),
        charge: Charge::IfAdmitted,
        group,
        quota: false,
        on_error: None,
    };
    let (a, b) = (mk(b"a", &l, 0), mk(b"b", &l, 1));
    let decide = Value::from(LIBRARY.function(ScriptId::Decide));
    let args = fcall(&[&a, &b], Scope::All, None, 5);
    assert_eq!(args[0], decide);
    let s = |v: &Value| v.as_str().map(|s| s.to_string()).unwrap_or_default();
    // function, 2 keys, 'fixed', now, n, groups, then limit, window, hits, algorithm each.
    assert_eq!(args.len(), 2 + 2 + 4 + 4 * 2);
    assert_eq!((s(&args[2]), s(&args[3])), ("a".into(), "b".into()));
    assert_eq!(s(&args[4]), "fixed");
    assert_eq!(
        (s(&args[5]), args[6].as_i64(), s(&args[7])),
        ("".into(), Some(2), "".into())
    );
    assert_eq!(args[8].as_i64(), Some(i64::from(u32::MAX)));
    assert_eq!(
        (args[9].as_i64(), args[10].as_i64()),
        (Some(60_000_000), Some(2))
    );
    // Groups not in check order are spelled out.
    let (c, d) = (mk(b"c", &l, 0), mk(b"d", &l, 0));
    assert_eq!(s(&fcall(&[&a, &c, &d], Scope::All, None, 5)[8]), "0 0 0");
    // Anything else keeps the long layout.
    let long = |checks: &[&Check<'_>], scope| {
        let args = fcall(checks, scope, None, 5);
        s(&args[2 + args[1].as_i64().unwrap() as usize])
    };
    assert_eq!(long(&[&a, &a], Scope::All), "all");
    assert_eq!(long(&[&a, &b], Scope::Part), "part");
    assert_eq!(long(&[&a, &mk(b"c", &cal, 1)], Scope::All), "all");
    // One sliding_log beside fixed windows is short; two are not.
    let log_args = fcall(&[&a, &mk(b"c", &log, 1)], Scope::All, None, 5);
    assert_eq!(s(&log_args[4]), "fixed");
    assert_eq!(log_args[15].as_i64(), Some(3));
    let two_logs = [&a, &mk(b"c", &log, 1), &mk(b"d", &log, 2)];
    assert_eq!(long(&two_logs, Scope::All), "all");
    let mut refund = mk(b"c", &l, 1);
    refund.ask.refund = true;
    let mut quota = mk(b"c", &l, 1);
    quota.quota = true;
    let mut always = mk(b"c", &l, 1);
    always.charge = Charge::Always;
    let mut zero = mk(b"c", &l, 1);
    zero.ask.hits = 0;
    for other in [&refund, &quota, &always, &zero] {
        assert_eq!(long(&[&a, other], Scope::All), "all");
    }
    // A short reply: every check allowed and charged.
    let r = decode(vec![9, 4, 100, 0, 50], 2).unwrap();
    assert_eq!(r.now, 9);
    assert!(r
        .answers
        .iter()
        .all(|a| a.verdict.allowed && a.verdict.charged && a.first_allowed));
    assert_eq!(
        (r.answers[1].verdict.remaining, r.answers[1].verdict.reset),
        (0, 50)
    );
}

#[test]
fn every_algorithm_has_its_own_code() {
    let codes: std::collections::HashSet<i64> =
        Algorithm::ALL.into_iter().map(algorithm_code).collect();
    assert_eq!(codes.len(), Algorithm::ALL.len());
    // The script's table holds codes 1..=8.
    assert!(codes.iter().all(|c| (1..=8).contains(c)));
    assert!(LUA.contains("[7] = new_distinct"));
    assert!(LUA.contains("[8] = new_concurrency"));
}

#[test]
fn distinct_values_and_calendar_bounds_are_passed() {
    use crate::algorithm::{Calendar, Window};
    use crate::model::Unit;
    let l = Limit::new(Algorithm::Distinct, 5, 3_600_000_000)
        .and_then(|l| {
            l.with_calendar(Calendar {
                unit: Unit::Hour,
                tz: chrono_tz::Asia::Kolkata,
            })
        })
        .unwrap();
    let c = Check {
        key: b"k",
        limit: &l,
        ask: Ask {
            value: 0xab,
            ..Ask::take(1)
        },
        charge: Charge::IfAdmitted,
        group: 0,
        quota: false,
        on_error: None,
    };
    let now = 1_700_000_000_000_000;
    let Window {
        window_start,
        window_end,
        ..
    } = l.frame(now);
    let (_, local) = encode(&[&c], Scope::All, Some(now), now);
    let (_, redis) = encode(&[&c], Scope::All, None, now);
    let s = |v: &Value| v.as_str().map(|s| s.to_string()).unwrap_or_default();
    assert_eq!(s(&local[3 + 5]), "00000000000000ab");
    // Fields per check: index, code, limit, window, param, value, hits, flags, group, then the
    // window bounds (start, end, and the Redis clock's alternatives).
    assert_eq!(local[3 + 9].as_i64(), Some(window_start));
    assert_eq!(local[3 + 10].as_i64(), Some(window_end));
    assert_eq!(
        (s(&local[3 + 11]), s(&local[3 + 12])),
        (String::new(), String::new())
    );
    assert_eq!(redis[3 + 11].as_i64(), Some(window_start - 3_600_000_000));
    assert_eq!(redis[3 + 12].as_i64(), Some(window_end + 3_600_000_000));
    assert_eq!(local.len(), 3 + FIELDS, "a check's fields, all");
}

#[test]
fn only_a_lone_epoch_aligned_window_a_sliding_log_or_a_bucket_takes_a_fast_path() {
    let fixed = Limit::fixed_window(10, 60_000_000).unwrap();
    let calendar = fixed
        .clone()
        .with_calendar(crate::algorithm::Calendar {
            unit: crate::model::Unit::Hour,
            tz: chrono_tz::UTC,
        })
        .unwrap();
    let gcra = Limit::new(Algorithm::Gcra, 10, 60_000_000).unwrap();
    let gcra = gcra.with_burst(4).unwrap();
    let distinct = Limit::new(Algorithm::Distinct, 10, 60_000_000).unwrap();
    let mk = |limit| Check {
        key: b"k",
        limit,
        ask: Ask {
            refund: true,
            ..Ask::take(3)
        },
        charge: Charge::Always,
        group: 0,
        quota: false,
        on_error: None,
    };
    let (one, cal, other, bucket) = (mk(&fixed), mk(&calendar), mk(&distinct), mk(&gcra));
    let log = Limit::new(Algorithm::SlidingLog, 10, 60_000_000).unwrap();
    let log = mk(&log);
    assert!(fast_path(&[&one], Scope::All).is_some());
    assert!(fast_path(&[&one], Scope::Part).is_none());
    assert!(fast_path(&[&one, &one], Scope::All).is_none());
    assert!(fast_path(&[&cal], Scope::All).is_none());
    assert!(fast_path(&[&other], Scope::All).is_none());
    let function = |id| Value::from(LIBRARY.function(id));
    assert_eq!(script_of(&[&log], Scope::All), ScriptId::SlidingLog);
    assert_eq!(
        fcall(&[&log], Scope::All, None, 5)[0],
        function(ScriptId::SlidingLog)
    );
    assert_eq!(script_of(&[&log, &log], Scope::All), ScriptId::Decide);
    let args = fcall(&[&one], Scope::All, None, 5);
    assert_eq!(args[0], function(ScriptId::FixedWindow));
    let ints: Vec<Option<i64>> = args.iter().map(|v| v.as_i64()).collect();
    // numkeys, key, now ('' = Redis clock), limit, window, hits, flags (REFUND | ALWAYS)
    assert_eq!(ints[1], Some(1));
    assert_eq!(args[3], EMPTY);
    assert_eq!(&ints[4..], [Some(10), Some(60_000_000), Some(3), Some(3)]);
    assert_eq!(
        fcall(&[&other], Scope::All, None, 5)[0],
        function(ScriptId::Decide)
    );
    // A bucket's fast path also takes its burst.
    let args = fcall(&[&bucket], Scope::All, None, 5);
    assert_eq!(args[0], function(ScriptId::Bucket));
    assert_eq!(script_of(&[&bucket], Scope::All), ScriptId::Bucket);
    let ints: Vec<Option<i64>> = args.iter().map(|v| v.as_i64()).collect();
    assert_eq!(
        &ints[4..],
        [Some(10), Some(60_000_000), Some(3), Some(3), Some(4)]
    );
}

#[test]
fn reply_of_the_wrong_length_is_an_error() {
    assert!(decode(vec![0, 1, 2], 1).is_err());
    let r = decode(vec![5, 1, 3, 10, 1, 1], 1).unwrap();
    assert_eq!(r.now, 5);
    assert!(r.answers[0].verdict.allowed && r.answers[0].first_allowed);
    assert_eq!(r.answers[0].verdict.remaining, 3);
    // fixed_window.lua's: now, flags (1 allowed + 2 charged), remaining, reset
    let fast = decode(vec![5, 2, 0, 10], 1).unwrap().answers[0];
    assert!(!fast.verdict.allowed && fast.verdict.charged && !fast.first_allowed);
    assert_eq!(fast.verdict.reset, 10);
    assert!(decode(vec![5, 2, 0, 10], 2).is_err());
}
