//! A stream driven report by report, as a table: each case sends reports for one bucket and
//! expects the assignment of each answer. Every feature of matching applies to a bucket id, read
//! as the descriptor of its entries sorted by key.

use super::{Quota, Usage};
use crate::support::{Sluice, StoreKind};

const CONFIG: &str = r#"
domain: q
descriptors:
  - key: name
    value: api
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 3}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: free
    rate_limit: {unlimited: true}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: "/api/*"
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: tb
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket}
  - key: seen
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 2, algorithm: distinct}
  - key: many
    rate_limits:
      - {unit: second, requests_per_unit: 4, name: burst}
      - {unit: hour, requests_per_unit: 5, name: hourly}
  - key: sw
    rate_limit: {unit: minute, requests_per_unit: 4, algorithm: sliding_window}
  - key: sl
    rate_limit: {unit: minute, requests_per_unit: 4, algorithm: sliding_log}
  - key: lb
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: leaky_bucket}
  - key: gcra
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra}
  - key: cal
    rate_limit: {unit: day, requests_per_unit: 4, align: calendar, timezone: Asia/Tokyo}
"#;

/// (case, reports of one bucket each, the assignment each answer carries)
type Case = (
    &'static str,
    &'static [Usage<'static>],
    &'static [&'static str],
);

const CASES: &[Case] = &[
    (
        "no rule matches: allow all",
        &[(&[("other", "x")], 1, 0)],
        &["allow_all"],
    ),
    (
        // 3 a minute: the first request (allowed before any assignment) is charged, the share
        // of the 2 left is granted; once used, nothing remains.
        "entries are sorted by key; a grant, then a denial once used",
        &[
            (&[("user", "alice"), ("name", "api")], 1, 0),
            (&[("user", "alice"), ("name", "api")], 2, 0),
            (&[("user", "alice"), ("name", "api")], 0, 5),
        ],
        &["tokens 2", "deny_all", "deny_all"],
    ),
    (
        "requests_per_unit 0: deny all",
        &[(&[("blocked", "x")], 1, 0)],
        &["deny_all"],
    ),
    (
        "unlimited: allow all",
        &[(&[("free", "x")], 1, 0), (&[("free", "x")], 50, 0)],
        &["allow_all", "allow_all"],
    ),
    (
        "shadow mode: allow all, whatever was used",
        &[(&[("shadow", "x")], 1, 0), (&[("shadow", "x")], 9, 0)],
        &["allow_all", "allow_all"],
    ),
    (
        // 5 a minute; a grant covers at most twice the last report's demand, or half of
        // what remains.
        "a wildcard value; grants follow demand",
        &[
            (&[("path", "/api/v1")], 1, 0),
            (&[("path", "/api/v1")], 2, 0),
            (&[("path", "/api/v1")], 2, 3),
        ],
        &["tokens 2", "tokens 2", "deny_all"],
    ),
    (
        "an unmatched wildcard value",
        &[(&[("path", "/web")], 1, 0)],
        &["allow_all"],
    ),
    (
        // 10 a second, burst 10: the store's bucket decides; time does not move here. The
        // first grant is half of the 9 left; the second all 5 left for a demand of 10.
        "token bucket",
        &[
            (&[("tb", "x")], 1, 0),
            (&[("tb", "x")], 4, 6),
            (&[("tb", "x")], 5, 5),
        ],
        &["tokens 4", "tokens 5", "deny_all"],
    ),
    (
        "leaky bucket, as the token bucket",
        &[
            (&[("lb", "x")], 1, 0),
            (&[("lb", "x")], 4, 6),
            (&[("lb", "x")], 5, 5),
        ],
        &["tokens 4", "tokens 5", "deny_all"],
    ),
    (
        "gcra, as the token bucket",
        &[
            (&[("gcra", "x")], 1, 0),
            (&[("gcra", "x")], 4, 6),
            (&[("gcra", "x")], 5, 5),
        ],
        &["tokens 4", "tokens 5", "deny_all"],
    ),
    (
        "a sliding log",
        &[
            (&[("sl", "x")], 1, 0),
            (&[("sl", "x")], 2, 0),
            (&[("sl", "x")], 1, 1),
        ],
        &["tokens 2", "tokens 1", "deny_all"],
    ),
    (
        "a calendar day in a time zone",
        &[
            (&[("cal", "x")], 1, 0),
            (&[("cal", "x")], 2, 0),
            (&[("cal", "x")], 1, 1),
        ],
        &["tokens 2", "tokens 1", "deny_all"],
    ),
    (
        "a sliding window",
        &[
            (&[("sw", "x")], 1, 0),
            (&[("sw", "x")], 2, 0),
            (&[("sw", "x")], 1, 1),
        ],
        &["tokens 2", "tokens 1", "deny_all"],
    ),
    (
        // 4 a second and 5 an hour: what remains is the least of the two.
        "several limits per descriptor",
        &[
            (&[("many", "x")], 1, 0),
            (&[("many", "x")], 2, 0),
            (&[("many", "x")], 1, 0),
        ],
        &["tokens 2", "tokens 1", "deny_all"],
    ),
    (
        "a value that was already counted keeps counting, so the bucket used it",
        &[
            (&[("seen", "p"), ("user", "alice")], 1, 0),
            (&[("seen", "p"), ("user", "alice")], 40, 0),
        ],
        &["allow_all", "allow_all"],
    ),
];

#[tokio::test]
async fn each_report_gets_the_assignment_of_its_rule() {
    for (case, reports, want) in CASES {
        // A server per case: each starts from an empty store.
        let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
        let mut q = Quota::open(s.server.grpc_addr).await.expect("open");
        let mut got = Vec::new();
        for usage in *reports {
            got.extend(q.report("q", &[*usage]).await);
        }
        assert_eq!(got, *want, "{case}");
        s.stop().await;
    }
}

#[tokio::test]
async fn distinct_values_beyond_the_limit_are_denied() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    let mut got = Vec::new();
    for user in ["alice", "bob", "carol", "alice"] {
        // One Envoy per user: each bucket's first report.
        let mut q = Quota::open(s.server.grpc_addr).await.expect("open");
        got.extend(
            q.report("q", &[(&[("seen", "p"), ("user", user)], 1, 0)])
                .await,
        );
    }
    assert_eq!(got, ["allow_all", "allow_all", "deny_all", "allow_all"]);
    s.stop().await;
}

#[tokio::test]
async fn a_report_of_several_buckets_is_answered_for_each() {
    let s = Sluice::start(
        StoreKind::Memory,
        Some(CONFIG),
        &["--rlqs-assignment-ttl", "7s"],
    )
    .await;
    let mut q = Quota::open(s.server.grpc_addr).await.expect("open");
    q.send(
        "q",
        &[
            (&[("free", "x")], 1, 0),
            (&[("blocked", "y")], 1, 0),
            (&[("name", "api"), ("user", "bob")], 1, 0),
        ],
    )
    .await;
    let answer = q.next().await.expect("answer");
    let got = super::summarize(&answer);
    let actions: Vec<&str> = got.iter().map(|(_, a)| a.as_str()).collect();
    assert_eq!(actions, ["allow_all", "deny_all", "tokens 2"]);
    assert_eq!(super::ttl_of(&answer), 7, "--rlqs-assignment-ttl");
    assert_eq!(got[2].0, super::bucket(&[("name", "api"), ("user", "bob")]));
    s.stop().await;
}

#[tokio::test]
async fn an_unknown_domain_allows_everything() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    let mut q = Quota::open(s.server.grpc_addr).await.expect("open");
    assert_eq!(
        q.report("elsewhere", &[(&[("blocked", "x")], 1, 0)]).await,
        ["allow_all"]
    );
    s.stop().await;
}
