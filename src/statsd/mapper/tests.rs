//! The mapping files of envoyproxy/ratelimit (built in) and Envoy Gateway (its
//! `statsd_conf.yaml`, a fixture) applied to the statsd names sluice produces.

use super::*;

const ENVOY_GATEWAY: &str =
    include_str!("../../../tests/fixtures/envoy-gateway-statsd-mapper.yaml");

fn check(mapper: &Mapper, statsd: &str, want: Option<(&str, &[(&str, &str)])>) {
    let got = mapper.map(statsd, EventType::Counter);
    let want = want.map(|(name, labels)| Mapped {
        name: name.to_string(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        help: None,
    });
    assert_eq!(got, want, "{statsd}");
}

#[test]
fn envoy_gateways_mapping_gives_its_names() {
    for mapper in [
        Mapper::parse("eg", ENVOY_GATEWAY).unwrap(),
        Mapper::builtin(),
    ] {
        let m = &mapper;
        check(
            m,
            "ratelimit.service.rate_limit.gw.route_route.over_limit",
            Some((
                "ratelimit_service_rate_limit_over_limit",
                &[("domain", "gw"), ("key1", "route_route")],
            )),
        );
        check(
            m,
            "ratelimit.service.rate_limit.gw.route_route.masked_remote_address_0_0_0_0/0.over_limit",
            Some((
                "ratelimit_service_rate_limit_over_limit",
                &[
                    ("domain", "gw"),
                    ("key1", "route_route"),
                    ("key2", "masked_remote_address_0_0_0_0/0"),
                ],
            )),
        );
        // Deeper keys keep the first two levels.
        check(
            m,
            "ratelimit.service.rate_limit.gw.a_1.b_2.c_3.total_hits",
            Some((
                "ratelimit_service_rate_limit_total_hits",
                &[("domain", "gw"), ("key1", "a_1"), ("key2", "b_2")],
            )),
        );
        check(
            m,
            "ratelimit.service.call.should_rate_limit.redis_error",
            Some((
                "ratelimit_service_should_rate_limit_error",
                &[("err_type", "redis_error")],
            )),
        );
        check(
            m,
            "ratelimit_server.ShouldRateLimit.total_requests",
            Some((
                "ratelimit_service_total_requests",
                &[("grpc_method", "ShouldRateLimit")],
            )),
        );
        check(
            m,
            "ratelimit.service.config_load_success",
            Some(("ratelimit_service_config_load_success", &[])),
        );
        // No mapping: the statsd name, escaped.
        check(
            m,
            "ratelimit.service.rate_limit.gw.route_route.over_limit_with_local_cache",
            Some((
                "ratelimit_service_rate_limit_gw_route_route_over_limit_with_local_cache",
                &[],
            )),
        );
    }
}

#[test]
fn globs_come_before_regexes_and_drop_drops() {
    let m = Mapper::parse(
        "t",
        r#"
mappings:
  - match: "a\\.(.*)"
    match_type: regex
    name: "from_regex"
    labels: {rest: "$1"}
  - match: "a.*"
    name: "from_glob_$1"
  - match: "b.*"
    action: drop
  - match: "c.*"
    match_metric_type: gauge
    name: "gauge_only"
"#,
    )
    .unwrap();
    check(&m, "a.x", Some(("from_glob_x", &[])));
    check(&m, "a.x.y", Some(("from_regex", &[("rest", "x.y")])));
    check(&m, "b.x", None);
    check(&m, "c.x", Some(("c_x", &[])));
}

#[test]
fn mappings_that_cannot_be_honoured_are_refused() {
    for (text, what) in [
        (
            "mappings:\n  - match: a.*\n    name: x\n    colour: red\n",
            "colour",
        ),
        (
            "mappings:\n  - match: \"(\"\n    match_type: regex\n    name: x\n",
            "regex",
        ),
        (
            "mappings:\n  - match: a.*\n    name: x\n    action: keep\n",
            "action keep",
        ),
        ("mappings:\n  - match: a.*\n", "needs a name"),
        (
            "mappings:\n  - match: a.*\n    name: x\n    match_type: fsm\n",
            "match_type fsm",
        ),
    ] {
        let e = Mapper::parse("m.yaml", text).err().expect(what).to_string();
        assert!(e.contains("m.yaml") && e.contains(what), "{what}: {e}");
    }
    let e = Mapper::load(Path::new("/nonexistent/conf.yaml"))
        .err()
        .unwrap();
    assert!(e.to_string().contains("/nonexistent/conf.yaml"), "{e}");
}
