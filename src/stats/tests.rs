use super::*;
use crate::config::{compile, ConfigFile, LoadOptions};
use crate::rules::RuleSet;

/// A rule's counters are cached under its id; a later rule set's rule of the same key
/// shares them, and a rule of an older set still in use finds its own by name.
#[test]
fn rule_counters_are_cached_by_rule_id() {
    let yaml = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    let load = || {
        let file = ConfigFile {
            path: "f.yaml".into(),
            content: yaml.into(),
        };
        compile(&[file], LoadOptions::default()).unwrap()
    };
    let sorted = |s: &RuleSet| {
        let mut v: Vec<(String, RuleId)> = s
            .all_rules()
            .iter()
            .map(|r| (r.full_key.clone(), r.id))
            .collect();
        v.sort_by(|x, y| x.0.cmp(&y.0));
        v
    };
    let (old, new) = (load(), load());
    let (o, n) = (sorted(&old), sorted(&new));
    assert_eq!(
        o.iter().map(|r| &r.0[..]).collect::<Vec<_>>(),
        ["d.a", "d.b"]
    );
    assert!(n[0].1.set > o[0].1.set);
    let r = StatsRegistry::new(0.8, 10);
    let d: Arc<str> = "d".into();
    let rule = |s: &RuleSet, key: &str| {
        let all = s.all_rules();
        let found = all.iter().find(|r| r.full_key == key).unwrap();
        r.of_rule(&d, found)
    };
    let a = rule(&old, "d.a");
    assert_eq!(&*a.key, "d.a");
    assert!(Arc::ptr_eq(&a, &rule(&old, "d.a")));
    assert!(r.rules.load().get(o[0].1).and_then(OnceLock::get).is_some());
    // The reload's rules take over the table and share the counters of unchanged keys.
    assert!(Arc::ptr_eq(&a, &rule(&new, "d.a")));
    assert!(r.rules.load().get(n[0].1).and_then(OnceLock::get).is_some());
    // A request still on the old set counts on the right key, without taking the table back.
    assert_eq!(&*rule(&old, "d.b").key, "d.b");
    assert_eq!(r.rules.load().set, n[0].1.set);
    assert_eq!(&*rule(&new, "d.b").key, "d.b");
    assert!(r.rules.load().get(n[1].1).and_then(OnceLock::get).is_some());
}

/// A rule set prepared before it serves finds its table sized: its requests fill slots
/// and never replace the table; unused rules get no counters.
#[test]
fn a_prepared_rule_set_never_rebuilds_the_table() {
    let yaml = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    let file = ConfigFile {
        path: "f.yaml".into(),
        content: yaml.into(),
    };
    let set = compile(&[file], LoadOptions::default()).unwrap();
    let r = StatsRegistry::new(0.8, 10);
    r.prepare(&set);
    let table = r.rules.load_full();
    let all = set.all_rules();
    assert_eq!(table.set, all[0].id.set);
    assert!(all.iter().all(|rule| table.get(rule.id).is_some()));
    assert!(r.snapshot().is_empty());
    let d: Arc<str> = "d".into();
    for rule in &all {
        r.of_rule(&d, rule);
    }
    assert!(Arc::ptr_eq(&table, &r.rules.load_full()));
    assert_eq!(r.snapshot().len(), 2);
    // Preparing the same set again changes nothing.
    r.prepare(&set);
    assert!(Arc::ptr_eq(&table, &r.rules.load_full()));
}

fn e(k: &str, v: &str) -> Entry {
    Entry {
        key: k.into(),
        value: v.into(),
    }
}

#[test]
fn keys_follow_envoyproxy_ratelimit() {
    let entries = [e("path", "/api/v1"), e("user", "alice")];
    let wild = Step::Wildcard {
        pattern: b"/api/*",
        shared: false,
    };
    let shared = Step::Wildcard {
        pattern: b"/api/*",
        shared: true,
    };
    let k = |steps: &[Step<'_>], vtm: &[bool], detailed| {
        dynamic_key("d", &entries, steps, vtm, detailed)
    };
    assert_eq!(k(&[wild, Step::Default], &[], false), "d.path_/api/*.user");
    assert_eq!(
        k(&[wild, Step::Default], &[false, true], false),
        "d.path_/api/*.user_alice"
    );
    assert_eq!(
        k(&[wild, Step::Default], &[true], false),
        "d.path_/api/v1.user"
    );
    assert_eq!(
        k(&[wild, Step::Default], &[], true),
        "d.path_/api/v1.user_alice"
    );
    assert_eq!(
        k(&[shared, Step::Default], &[], true),
        "d.path_/api/*.user_alice"
    );
    assert_eq!(
        k(&[Step::Exact, Step::Exact], &[], false),
        "d.path_/api/v1.user_alice"
    );
    assert_eq!(override_key("d", &entries), "d.path.user");
}

#[test]
fn counters_follow_the_base_limiter() {
    let r = StatsRegistry::new(0.8, 10);
    let d: Arc<str> = "d".into();
    let c = r.dynamic(&d, "d.k", || unreachable!());
    let obs = |remaining, allowed, hits| Observation {
        hits,
        limit: 10,
        allowed,
        charged: allowed,
        remaining,
        shadow: false,
        cached: false,
    };
    // 10 per window, near at 8: hits 1..=10 allowed (the 9th and 10th are near), then over.
    for i in 1..=10u64 {
        r.record(&c, obs(10 - i, true, 1));
    }
    r.record(&c, obs(0, false, 1));
    assert_eq!(c.get(TOTAL_HITS), 11);
    assert_eq!(c.get(WITHIN_LIMIT), 10);
    assert_eq!(c.get(NEAR_LIMIT), 2);
    assert_eq!(c.get(OVER_LIMIT), 1);
    // Crossing the threshold with several hits counts only the part beyond it.
    let c2 = r.dynamic(&d, "d.k2", || unreachable!());
    r.record(&c2, obs(1, true, 9));
    assert_eq!(c2.get(NEAR_LIMIT), 1);
}

#[test]
fn dynamic_keys_are_capped() {
    let r = StatsRegistry::new(0.8, 2);
    let d: Arc<str> = "d".into();
    let fallback = Arc::new(RuleCounters::new(d.clone(), "d.rule".into()));
    for v in ["a", "b", "c", "d"] {
        r.dynamic(&d, &format!("d.k_{v}"), || fallback.clone());
    }
    assert_eq!(r.snapshot().len(), 2);
    assert_eq!(r.overflow(), 2);
    // Known keys are still found past the cap.
    assert_eq!(&*r.dynamic(&d, "d.k_a", || fallback.clone()).key, "d.k_a");
}
