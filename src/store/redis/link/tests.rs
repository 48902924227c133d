use super::task::{deliver, unbatch};
use super::*;

/// The commands encoded in `out`, each as its arguments' text.
fn commands(out: &[u8]) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    let mut at = 0;
    while at < out.len() {
        let (Frame::Array(Some(parts)), used) = resp::parse(&out[at..]).unwrap().unwrap() else {
            panic!("not a command");
        };
        at += used;
        let text = parts
            .iter()
            .map(|f| match f {
                Frame::Bulk(Some(b)) => String::from_utf8_lossy(b).into_owned(),
                other => panic!("{other:?}"),
            })
            .collect();
        commands.push(text);
    }
    commands
}

/// A fast fixed_window decision of one hit on `key` (60 s windows).
fn fixed_window(key: &'static str, now: Option<i64>, limit: i64) -> Call<'static> {
    Call::Fast(FastCall {
        id: ScriptId::FixedWindow,
        key: key.as_bytes(),
        now,
        ints: [limit, 60_000_000, 1, 0, 0],
        n: 4,
    })
}

fn batched(fast: Option<Option<i64>>) -> (Batched, Answer) {
    let (reply, rx) = Reply::new(Duration::from_secs(60));
    (
        Batched {
            reply,
            fast,
            plain: None,
        },
        rx,
    )
}

#[test]
fn a_batch_reply_is_split_into_each_decisions_own_reply() {
    use Frame::{Array, Error, Integer};
    let ws: Vec<Batched> = [Some(None), Some(Some(7)), None, Some(None)]
        .into_iter()
        .map(|f| batched(f).0)
        .collect();
    let whole = Array(Some(vec![Integer(100), Integer(1), Integer(2)]));
    let items = vec![
        Integer(42),
        // A fast path on the Redis clock, one given its own now, batch.lua's whole
        // reply, and a fast path's error.
        Integer(3),
        Integer(9),
        Integer(60),
        Integer(1),
        Integer(8),
        Integer(61),
        whole.clone(),
        Error("WRONGTYPE".into()),
    ];
    let four = |a, b, c, d| Array(Some(vec![Integer(a), Integer(b), Integer(c), Integer(d)]));
    assert_eq!(
        unbatch(items, &ws),
        Some(vec![
            four(42, 3, 9, 60),
            four(7, 1, 8, 61),
            whole,
            Error("WRONGTYPE".into())
        ])
    );
}

#[test]
fn a_fast_decision_with_the_values_of_the_one_before_travels_as_a_repeat() {
    let mut q = Queued::default();
    let fw = fixed_window;
    let decide = Call::Whole(vec![
        Value::from("sha"),
        Value::Integer(1),
        Value::from("x"),
        Value::from("all"),
    ]);
    let mut waiting = Vec::new();
    let mut push = |call: &Call<'_>| {
        let (reply, rx) = Reply::new(Duration::from_secs(60));
        waiting.push(rx);
        q.push(call, reply).unwrap();
    };
    push(&fw("a", None, 10));
    push(&fw("b", None, 10)); // a repeat
    push(&decide);
    push(&fw("c", None, 10)); // a repeat of a's: batch.lua between
    push(&fw("d", None, 11));
    push(&fw("e", Some(7), 11)); // its own now
    let (mut out, mut waiting) = (Vec::new(), VecDeque::new());
    assert!(q.write(&mut out, &Plain::default(), &mut waiting));
    let [text] = &commands(&out)[..] else {
        panic!("not one command");
    };
    let code = ScriptId::FixedWindow.code().to_string();
    let d = ScriptId::Decide.code().to_string();
    // FCALL batch 6 keys.., 6 decisions, then each one's code and values, or `=`.
    let tail: Vec<&str> = text[3 + 6..].iter().map(String::as_str).collect();
    let want = [
        "6", &code, "", "10", "60000000", "1", "0", "=", &d, "1", "1", "all", "=", &code, "", "11",
        "60000000", "1", "0", &code, "7", "11", "60000000", "1", "0",
    ];
    assert_eq!(tail, want);
    assert_eq!(text[2], "6");
    assert_eq!(&text[3..9], ["a", "b", "x", "c", "d", "e"]);
}

#[test]
fn a_take_of_a_key_charged_in_this_window_goes_plain_after_one_time() {
    let shared = Shared {
        state: Mutex::new(State::default()),
        wake: Notify::new(),
        batch: true,
    };
    let now = 1_800_000_000_123_456;
    let start = now - now % 60_000_000;
    let mut rxs = Vec::new();
    {
        let mut s = shared.lock();
        s.plain.saw_clock(now);
        for key in ["a", "b"] {
            let mut bulk = Vec::new();
            resp::bulk(&mut bulk, key.as_bytes());
            s.plain.learn(
                Plain::fingerprint(&bulk),
                60_000_000,
                now,
                start + 60_000_000 - now,
                false,
            );
        }
        // `a` and `b` charged in this window; `c` not seen; `d` of two hits.
        for (key, hits) in [("a", 1), ("b", 1), ("c", 1), ("d", 2)] {
            let (reply, rx) = Reply::new(Duration::from_secs(60));
            rxs.push(rx);
            let mut call = fixed_window(key, None, 3);
            if let Call::Fast(f) = &mut call {
                f.ints[2] = hits;
            }
            s.queued.push(&call, reply).unwrap();
        }
        let s = &mut *s;
        let mut out = Vec::new();
        assert!(s.queued.write(&mut out, &s.plain, &mut s.waiting));
        let ws = start.to_string();
        let cmds = commands(&out);
        assert_eq!(cmds[0], ["TIME"]);
        assert_eq!(cmds[1], ["HINCRBY", "a", &ws, "1"]);
        assert_eq!(cmds[2], ["HINCRBY", "b", &ws, "1"]);
        assert_eq!(cmds[3][..2], ["FCALL", LIBRARY.batch()]);
        assert_eq!(cmds.len(), 4);
    }
    // TIME, then: `a` rejected (its count 4 over 3), `b` on a field it found absent.
    let secs = now / 1_000_000;
    let us = now % 1_000_000;
    let mut inbox = format!(
        "*2\r\n${}\r\n{secs}\r\n${}\r\n{us}\r\n:5\r\n:1\r\n",
        secs.to_string().len(),
        us.to_string().len()
    )
    .into_bytes();
    deliver(&shared, &mut inbox).unwrap();
    assert!(inbox.is_empty());
    assert!(rxs[0].try_recv().is_err(), "a waits for its retake");
    assert!(rxs[1].try_recv().is_err(), "b waits for its mend");
    let s = shared.lock();
    let ws = start.to_string();
    assert_eq!(
        commands(&s.out),
        vec![
            vec![
                "FCALL",
                LIBRARY.mend(),
                "1",
                "a",
                "retake",
                &ws,
                "3",
                "60000000"
            ],
            vec![
                "FCALL",
                LIBRARY.mend(),
                "1",
                "b",
                "settle",
                &ws,
                "3",
                "60000000"
            ],
        ]
    );
    assert_eq!(s.unsent, 2);
    // Still waiting: the batch (c and d), then the two mends.
    assert!(matches!(
        s.waiting.iter().collect::<Vec<_>>()[..],
        [Waiter::Batch(_), Waiter::Mend(..), Waiter::Mend(..)]
    ));
    drop(s);
    // The connection drops before the mends leave: their takes' hits are in Redis, so
    // their callers learn that their calls may have run (not "not sent": deciding them
    // again elsewhere would count twice).
    shared.close("killed");
    for rx in &mut rxs[..2] {
        assert!(matches!(rx.try_recv(), Ok(Err(CallError::Lost(_, _)))));
    }
    // `b`'s settle (the key's expiry) goes on the next connection, before anything else;
    // `a`'s give-back does not (its hit stays counted).
    let mut s = shared.lock();
    s.send_carried();
    assert_eq!(
        commands(&s.out),
        vec![vec![
            "FCALL",
            LIBRARY.mend(),
            "1",
            "b",
            "forget",
            &ws,
            "3",
            "60000000"
        ]]
    );
    assert!(matches!(
        s.waiting.iter().collect::<Vec<_>>()[..],
        [Waiter::Carried(_)]
    ));
    assert!(s.carry.is_empty());
}

#[test]
fn on_a_cluster_node_the_decisions_of_one_slot_share_an_fcall() {
    let mut q = Queued {
        by_slot: true,
        ..Queued::default()
    };
    let fw = |key| fixed_window(key, None, 10);
    // `{a}x` is in `a`'s slot; `b` and `c` each in another.
    let keys = ["a", "b", "c", "{a}x"];
    let mut rxs = Vec::new();
    for key in keys {
        let (reply, rx) = Reply::new(Duration::from_secs(60));
        rxs.push(rx);
        q.push(&fw(key), reply).unwrap();
    }
    // A caller gone meanwhile is left out.
    drop(rxs.remove(1));
    let (mut out, mut waiting) = (Vec::new(), VecDeque::new());
    q.write_by_slot(&mut out, &mut waiting);
    assert!(q.is_empty());
    assert!(
        matches!(waiting.make_contiguous(), [Waiter::Batch(two), Waiter::Fcall(..)] if two.len() == 2)
    );
    let code = ScriptId::FixedWindow.code().to_string();
    let (batch, one) = (LIBRARY.batch(), LIBRARY.function(ScriptId::FixedWindow));
    let want: [Vec<&str>; 2] = [
        vec![
            "FCALL", batch, "2", "a", "{a}x", "2", &code, "", "10", "60000000", "1", "0", "=",
        ],
        vec!["FCALL", one, "1", "c", "", "10", "60000000", "1", "0"],
    ];
    assert_eq!(commands(&out), want);
}

#[test]
fn a_batch_reply_out_of_its_layout_is_refused() {
    use Frame::{Array, Integer};
    let ws = vec![batched(Some(None)).0];
    // Too short, too long, no clock, and a fast path answered as a whole.
    for items in [
        vec![Integer(1), Integer(3), Integer(9)],
        vec![Integer(1), Integer(3), Integer(9), Integer(60), Integer(0)],
        vec![Integer(3), Integer(9), Integer(60)],
        vec![Integer(1), Array(Some(vec![]))],
    ] {
        assert_eq!(unbatch(items.clone(), &ws), None, "{items:?}");
    }
}

#[allow(clippy::disallowed_methods)] // deadlines are real time, as in the link
#[test]
fn callers_past_their_deadline_are_timed_out_and_their_decisions_not_sent() {
    let mut s = State::default();
    let fw = |key| fixed_window(key, None, 10);
    // Written and waiting: one past its deadline, one not.
    let (gone, mut gone_rx) = Reply::new(Duration::ZERO);
    let (late, mut late_rx) = Reply::new(Duration::from_secs(60));
    assert!(s.arm(gone.deadline));
    assert!(!s.arm(late.deadline), "a later deadline keeps the timer");
    s.waiting.push_back(Waiter::Fcall(gone, None));
    s.waiting.push_back(Waiter::Batch(vec![Batched {
        reply: late,
        fast: Some(None),
        plain: None,
    }]));
    // Queued, not written: past its deadline, so never sent.
    let (queued, mut queued_rx) = Reply::new(Duration::ZERO);
    s.queued.push(&fw("a"), queued).unwrap();
    let next = s.expire();
    assert!(next.is_some_and(|n| n > Instant::now() + Duration::from_secs(50)));
    assert_eq!(s.timer, next);
    assert!(matches!(gone_rx.try_recv(), Ok(Err(CallError::Timeout))));
    assert!(matches!(queued_rx.try_recv(), Ok(Err(CallError::Timeout))));
    assert!(late_rx.try_recv().is_err(), "still waiting");
    let mut out = Vec::new();
    let mut waiting = VecDeque::new();
    assert!(!s.queued.write(&mut out, &s.plain, &mut waiting));
    assert!(out.is_empty(), "a timed-out decision is not sent");
    // Its reply, when it comes, goes to no one; the other caller gets its own.
    let Some(Waiter::Fcall(mut r, _)) = s.waiting.pop_front() else {
        panic!("not the FCALL's waiter");
    };
    r.send(Ok(Frame::Integer(1)));
    let Some(Waiter::Batch(mut rs)) = s.waiting.pop_front() else {
        panic!("not the batch");
    };
    rs[0].reply.send(Ok(Frame::Integer(2)));
    assert_eq!(late_rx.try_recv().unwrap().unwrap(), Frame::Integer(2));
}
