//! The key layout: its fields, escaping, and the hash tag's extent.

use super::*;
use crate::algorithm::Algorithm;
use proptest::prelude::*;

fn key(domain: &str, entries: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    build(
        &mut out,
        b"",
        domain,
        entries
            .iter()
            .map(|&(key, value)| Part::Value { key, value }),
        &Limit::fixed_window(1, 1_000_000).unwrap(),
        None,
    );
    out
}

#[test]
fn layout() {
    assert_eq!(
        key("d", &[(b"k", b"v w"), (b"ip", b"{1}")]),
        b"sluice:v2:{d|k=v%20w|ip=%7B1%7D}:fixed_window:1000000".to_vec()
    );
    assert_eq!(
        key("d", &[(b" a", b"b c "), (b"", b"%%")]),
        b"sluice:v2:{d|%20a=b%20c%20|=%25%25}:fixed_window:1000000".to_vec()
    );
}

#[test]
fn descriptor_keys_leave_out_shared_and_counted_values() {
    let entries = [
        Entry {
            key: b"path".to_vec(),
            value: b"/a/1".to_vec(),
        },
        Entry {
            key: b"user".to_vec(),
            value: b"bob".to_vec(),
        },
    ];
    let of = |limit: &Limit, shared: bool| {
        let mut out = b"x".to_vec();
        append_descriptor(
            &mut out,
            b"",
            "d",
            HashTag::Descriptor,
            &entries,
            |i| (shared && i == 0).then_some(&b"/a/*"[..]),
            limit.algorithm().counts_values(),
            &limit_tail(HashTag::Descriptor, limit, None),
        );
        String::from_utf8(out).unwrap()
    };
    let fixed = Limit::fixed_window(1, 1_000_000).unwrap();
    let distinct = Limit::new(Algorithm::Distinct, 1, 1_000_000).unwrap();
    assert_eq!(
        of(&fixed, false),
        "xsluice:v2:{d|path=/a/1|user=bob}:fixed_window:1000000"
    );
    assert_eq!(
        of(&fixed, true),
        "xsluice:v2:{d|path~/a/%2A|user=bob}:fixed_window:1000000"
    );
    assert!(of(&distinct, false).starts_with("xsluice:v2:{d|path=/a/1|user#}:distinct:"));
}

#[test]
fn shapes_name_what_changes_the_state_layout() {
    let build_with = |limit: &Limit, parts: &[Part<'_>], name: Option<&str>| {
        let mut out = Vec::new();
        build(&mut out, b"", "d", parts.iter().copied(), limit, name);
        String::from_utf8(out).unwrap()
    };
    let user = Part::Value {
        key: b"user",
        value: b"u1",
    };
    let sw = Limit::new(Algorithm::SlidingWindow, 5, 1_000_000).unwrap();
    let sw = sw.with_precision(4).unwrap();
    assert_eq!(
        build_with(&sw, &[user], Some("per-second")),
        "sluice:v2:{d|user=u1}:sliding_window:1000000:p=4:per-second"
    );
    let cal = Limit::fixed_window(5, 86_400_000_000).unwrap();
    let cal = cal
        .with_calendar(crate::algorithm::Calendar {
            unit: crate::model::Unit::Day,
            tz: chrono_tz::Asia::Shanghai,
        })
        .unwrap();
    assert_eq!(
        build_with(&cal, &[user], None),
        "sluice:v2:{d|user=u1}:fixed_window:86400000000:tz=Asia/Shanghai"
    );
    let d = Limit::new(Algorithm::Distinct, 5_000, 1_000_000).unwrap();
    assert_eq!(
        build_with(&d, &[user, Part::Counted { key: b"ip" }], None),
        "sluice:v2:{d|user=u1|ip#}:distinct:1000000:set=hll"
    );
}

#[test]
fn a_domain_hash_tag_covers_the_domain_only() {
    let mut out = Vec::new();
    let parts = [Part::Value {
        key: b"k",
        value: b"{v}",
    }];
    build_tagged(
        &mut out,
        b"p:",
        "d",
        HashTag::Domain,
        parts,
        &Limit::fixed_window(1, 1_000_000).unwrap(),
        None,
    );
    assert_eq!(
        out,
        b"p:sluice:v2:{d}|k=%7Bv%7D:fixed_window:1000000".to_vec()
    );
    assert_eq!(hash_tag(&out), b"d");
    assert_ne!(out, key("d", &[(b"k", b"{v}")]), "the layouts differ");
}

#[test]
fn joining_that_collides_in_envoyproxy_ratelimit_does_not_here() {
    assert_ne!(key("d", &[(b"a_b", b"c")]), key("d", &[(b"a", b"b_c")]));
    assert_ne!(
        key("d", &[(b"a", b"b|c=d")]),
        key("d", &[(b"a", b"b"), (b"c", b"d")])
    );
}

fn hash_tag(k: &[u8]) -> &[u8] {
    let open = k.iter().position(|&b| b == b'{').unwrap();
    let close = open + k[open..].iter().position(|&b| b == b'}').unwrap();
    &k[open + 1..close]
}

proptest! {
    #[test]
    fn distinct_descriptors_give_distinct_keys(
        a in proptest::collection::vec((any::<Vec<u8>>(), any::<Vec<u8>>()), 1..4),
        b in proptest::collection::vec((any::<Vec<u8>>(), any::<Vec<u8>>()), 1..4),
    ) {
        let ka = key("d", &a.iter().map(|(k, v)| (&k[..], &v[..])).collect::<Vec<_>>());
        let kb = key("d", &b.iter().map(|(k, v)| (&k[..], &v[..])).collect::<Vec<_>>());
        prop_assert_eq!(a == b, ka == kb);
    }

    #[test]
    fn hash_tag_covers_the_whole_descriptor(v in any::<Vec<u8>>()) {
        let k = key("d", &[(b"k", &v)]);
        let tag = hash_tag(&k);
        prop_assert!(tag.starts_with(b"d|k="));
        prop_assert!(k.ends_with(b"}:fixed_window:1000000"), "suffix");
        prop_assert_eq!(tag.len() + "sluice:v2:{}:fixed_window:1000000".len(), k.len());
    }
}
