use super::*;

fn take(p: &Plain, limit: i64, window: i64) -> Option<Take> {
    let mut key = Vec::new();
    resp::bulk(&mut key, b"k");
    p.take(
        p.estimate()?,
        &key,
        Plain::fingerprint(&key),
        Args { limit, window },
    )
}

/// A connection that has seen Redis' clock, and key `k`'s fingerprint: (the connection,
/// fingerprint, a minute window, that clock).
fn minute_window_seen() -> (Plain, u64, i64, Micros) {
    let mut p = Plain::default();
    let now = 1_800_000_000_000_000 + 7;
    p.saw_clock(now);
    let mut key = Vec::new();
    resp::bulk(&mut key, b"k");
    (p, Plain::fingerprint(&key), 60_000_000, now)
}

fn time(now: Micros) -> Frame {
    let part = |n: i64| Frame::Bulk(Some(n.to_string().into_bytes()));
    Frame::Array(Some(vec![part(now / 1_000_000), part(now % 1_000_000)]))
}

fn ints(f: &Frame) -> Vec<i64> {
    resp::integers(f.clone()).unwrap()
}

#[test]
fn only_one_hit_of_mode_0_on_the_redis_clock_goes_plain() {
    assert_eq!(
        Args::of(None, &[10, 60, 1, 0]),
        Some(Args {
            limit: 10,
            window: 60
        })
    );
    assert_eq!(Args::of(Some(5), &[10, 60, 1, 0]), None);
    assert_eq!(Args::of(None, &[10, 60, 2, 0]), None);
    assert_eq!(Args::of(None, &[10, 60, 1, 1]), None);
    assert_eq!(Args::of(None, &[0, 60, 1, 0]), None);
    assert_eq!(Args::of(None, &[i64::MAX, 60, 1, 0]), None);
}

#[test]
fn a_key_goes_plain_only_once_seen_charged_in_the_current_window() {
    let mut p = Plain::default();
    let w = 60_000_000;
    let fp = {
        let mut key = Vec::new();
        resp::bulk(&mut key, b"k");
        Plain::fingerprint(&key)
    };
    // No clock seen yet.
    p.charged(fp, 0, false);
    assert!(take(&p, 10, w).is_none());
    let now = 1_800_000_000_000_000;
    p.saw_clock(now);
    assert!(take(&p, 10, w).is_none(), "charged in another window");
    let reset = w - now % w;
    p.learn(fp, w, now, reset + w, false);
    assert!(
        take(&p, 10, w).is_none(),
        "charged in a later window than now's"
    );
    p.learn(fp, w, now, reset, false);
    let t = take(&p, 10, w).unwrap();
    assert_eq!(t.start, now - now % w);
}

#[test]
fn the_reply_decides_as_the_scripts_common_case() {
    let (mut p, fp, w, now) = minute_window_seen();
    let start = now - now % w;
    p.learn(fp, w, now, start + w - now, false);
    let t = take(&p, 3, w).unwrap();
    assert!(p.saw_time(&time(now)));
    // count + 1 after the take: 2 -> the first hit counted, 2 left.
    let PlainReply::Answer(a) = p.decide(&t, &Frame::Integer(2)).unwrap() else {
        panic!()
    };
    assert_eq!(ints(&a), vec![now, 3, 2, start + w - now]);
    // The last hit: answered, and the key's next takes go to the script.
    let PlainReply::Answer(a) = p.decide(&t, &Frame::Integer(4)).unwrap() else {
        panic!()
    };
    assert_eq!(ints(&a)[1..3], [3, 0]);
    assert!(
        take(&p, 3, w).unwrap().peek,
        "the key's next takes are peeks"
    );
    // One sent before that was seen: decided again by the script, nothing left to give back.
    assert_eq!(
        p.decide(&t, &Frame::Integer(5)).unwrap(),
        PlainReply::Mend("retake")
    );
    // A superseded window's mark (2^53): the later window decides.
    p.learn(fp, w, now, start + w - now, false);
    assert_eq!(
        p.decide(&t, &Frame::Integer((1 << 53) + 1)).unwrap(),
        PlainReply::Mend("retake")
    );
    assert!(take(&p, 3, w).is_none());
    // The field was absent: settle, and the key is no longer taken plain.
    p.learn(fp, w, now, start + w - now, false);
    assert_eq!(
        p.decide(&t, &Frame::Integer(1)).unwrap(),
        PlainReply::Mend("settle")
    );
    assert!(take(&p, 3, w).is_none());
}

#[test]
fn a_key_seen_at_its_limit_is_peeked_and_rejected_from_the_count_read() {
    let (mut p, fp, w, now) = minute_window_seen();
    let end = now - now % w + w;
    // A script's rejection of one hit (flags 0) in the window of `now`: full.
    p.learn(fp, w, now, end - now, true);
    let t = take(&p, 3, w).unwrap();
    assert!(t.peek);
    let mut out = Vec::new();
    Plain::encode_take(&mut out, &t);
    assert!(
        out.starts_with(b"*3\r\n$4\r\nHGET\r\n"),
        "{:?}",
        String::from_utf8_lossy(&out)
    );
    assert!(p.saw_time(&time(now)));
    let bulk = |n: i64| Frame::Bulk(Some(n.to_string().into_bytes()));
    // count + 1 = 4: the count is the limit, so the take is rejected; nothing was written.
    let PlainReply::Answer(a) = p.decide(&t, &bulk(4)).unwrap() else {
        panic!()
    };
    assert_eq!(ints(&a), vec![now, 0, 0, end - now]);
    assert!(take(&p, 3, w).unwrap().peek, "still full");
    // Past the limit (a plain take of another connection not yet given back): rejected.
    assert!(matches!(
        p.decide(&t, &bulk(9)),
        Some(PlainReply::Answer(_))
    ));
    // Room again (a refund gave hits back): the script decides, and the key is forgotten.
    assert_eq!(p.decide(&t, &bulk(3)), Some(PlainReply::Mend("decide")));
    assert!(take(&p, 3, w).is_none());
    // No field (deleted, evicted), a superseded window's mark, a count not of the layout:
    // the script decides.
    for f in [
        Frame::Bulk(None),
        bulk((1 << 53) + 1),
        bulk(0),
        Frame::Bulk(Some(b"x".to_vec())),
    ] {
        p.learn(fp, w, now, end - now, true);
        let got = p.decide(&t, &f);
        assert!(
            got == Some(PlainReply::Mend("decide"))
                || (got.is_none() && f == Frame::Bulk(Some(b"x".to_vec()))),
            "{f:?}: {got:?}"
        );
    }
    // Redis refused the read: its error is the answer, nothing ran.
    assert_eq!(p.decide(&t, &Frame::Error("READONLY".into())), None);
    // The write's TIME in the next window: not this window's count, so the script decides.
    p.learn(fp, w, now, end - now, true);
    assert!(p.saw_time(&time(end + 5)));
    assert_eq!(p.decide(&t, &bulk(4)), Some(PlainReply::Mend("decide")));
}

#[test]
fn a_take_whose_write_ran_in_another_window_is_taken_again() {
    let mut p = Plain::default();
    let w = 1_000_000;
    let now = 1_800_000_000_999_990;
    let mut key = Vec::new();
    resp::bulk(&mut key, b"k");
    let t = Take {
        fingerprint: Plain::fingerprint(&key),
        key,
        args: Args {
            limit: 3,
            window: w,
        },
        start: now - now % w,
        peek: false,
    };
    p.learn(t.fingerprint, w, now, w - now % w, false);
    assert!(p.saw_time(&time(now + 20)));
    assert_eq!(
        p.decide(&t, &Frame::Integer(2)).unwrap(),
        PlainReply::Mend("retake")
    );
    assert!(!p.saw_time(&Frame::Integer(1)));
}
