//! A fixed window's first take (fixed_window.lua `fw_ended`, `fw_settle`): counted in place
//! whenever the key holds only ended windows, as the port's write would leave the key (the
//! window before superseded, older marks dropped, the expiry set), and handed to the port
//! otherwise. A hot key holds the window before and an older one's mark from its third window
//! on, so this is every window's first take of it.

use super::*;
use sluice::store::redis::library::LIBRARY;
use sluice::store::redis::script::ScriptId;

#[test]
fn a_first_take_over_ended_windows_is_counted_in_place_and_leaves_what_the_port_leaves() {
    let redis = with_library();
    let day = 86_400 * SEC;
    // Mid-window of a day, so that no case crosses an edge.
    let now = redis_now(&redis);
    let ws = now - now % day;
    let take = |key: &str| -> Vec<i64> {
        redis
            .cli(&[
                "FCALL",
                LIBRARY.function(ScriptId::FixedWindow),
                "1",
                key,
                &now.to_string(),
                "10",
                &day.to_string(),
                "1",
                "0",
            ])
            .lines()
            .map(|l| l.trim().parse().unwrap())
            .collect()
    };
    let after = vec![
        (ws.to_string(), "2".to_string()),
        ((ws - day).to_string(), SUPERSEDED.to_string()),
    ];
    // Each case: the key's fields before; whether the port decides (it reads the key again:
    // a second HGETALL), and the fields after.
    type Case<'a> = (&'a str, Vec<(i64, &'a str)>, bool);
    let cases: [Case<'_>; 4] = [
        // A hot key's third window on: the window before and an older mark.
        (
            "first:mark",
            vec![(ws - day, "7"), (ws - 2 * day, SUPERSEDED)],
            false,
        ),
        ("first:before", vec![(ws - day, "7")], false),
        // Two windows that both count (never written by sluice): the port decides.
        (
            "first:two",
            vec![(ws - day, "7"), (ws - 2 * day, "3")],
            true,
        ),
        // Not the layout's (a count below the stored minimum of 1): the port decides.
        (
            "first:odd",
            vec![(ws - day, "7"), (ws - 2 * day, "0")],
            true,
        ),
    ];
    for (k, before, port) in cases {
        for (f, v) in before {
            redis.cli(&["HSET", k, &f.to_string(), v]);
        }
        let reads = redis.command_calls("hgetall");
        let r = take(k);
        assert_eq!(r[1..3], [3, 9], "{k}: {r:?}");
        assert_eq!(
            redis.command_calls("hgetall") - reads,
            1 + u64::from(port),
            "{k}"
        );
        assert_eq!(fields(&redis, k.as_bytes()), after, "{k}");
        let ttl: i64 = redis.cli(&["PTTL", k]).trim().parse().unwrap();
        assert!(ttl > 0 && ttl <= 86_401_000, "{k}: {ttl}");
    }

    // A later window (a sluice whose clock runs ahead wrote it) wins: the port decides, and
    // the take counts there.
    let k = "first:later";
    redis.cli(&["HSET", k, &(ws + day).to_string(), "3"]);
    let r = take(k);
    assert_eq!(r[1..3], [3, 7], "{r:?}");
    assert_eq!(
        fields(&redis, k.as_bytes()),
        vec![((ws + day).to_string(), "4".to_string())]
    );
}
