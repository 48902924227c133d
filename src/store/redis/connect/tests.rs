use super::*;

#[test]
fn comma_separated_hosts_become_nodes() {
    assert_eq!(
        normalize_url("redis-cluster://u:p@a:1,b:2,c:3"),
        "redis-cluster://u:p@a:1?node=b:2&node=c:3"
    );
    assert_eq!(
        normalize_url("redis-sentinel://a:1,b:2/0?sentinelServiceName=m"),
        "redis-sentinel://a:1/0?node=b:2&sentinelServiceName=m"
    );
    assert_eq!(normalize_url("redis://h:1/2"), "redis://h:1/2");
}

fn opts(url: &str) -> ConnectOptions {
    ConnectOptions::for_url(url)
}

#[test]
fn scheme_chooses_topology() {
    let t = |u: &str| config(&opts(u)).map(|(_, t)| t).unwrap();
    assert_eq!(t("redis://127.0.0.1:7000"), Topology::Standalone);
    assert_eq!(
        t("redis-cluster://127.0.0.1:7000,127.0.0.1:7001"),
        Topology::Cluster
    );
    assert_eq!(
        t("redis-sentinel://127.0.0.1:26379?sentinelServiceName=m"),
        Topology::Sentinel
    );
    assert!(config(&opts("redis-sentinel://127.0.0.1:26379")).is_err());
    let mut o = opts("redis://127.0.0.1:7000");
    o.tls_ca = Some("/nonexistent".into());
    assert!(config(&o).is_err(), "a CA needs a TLS URL");
}

#[test]
fn urls_read_as_fred_read_them() {
    let c = |u: &str| config(&opts(u)).map(|(c, _)| c);
    let s = c("redis://u%40x:p%3Aw@h.example/3").unwrap();
    assert_eq!(s.server, Server::Standalone("h.example".into(), 6379));
    assert_eq!(s.username.as_deref(), Some("u@x"));
    assert_eq!(
        s.password
            .as_ref()
            .map(|p| p.expose().to_string())
            .as_deref(),
        Some("p:w")
    );
    assert_eq!(s.database, Some(3));
    assert!(s.tls.is_none());
    let s = c("redis://:pw@h:1").unwrap();
    assert_eq!(s.username, None);
    assert!(s.password.is_some());
    assert_eq!(c("redis://h:1/").unwrap().database, None);
    assert!(c("redis://h:1/x").is_err());
    assert!(c("redis://h:1/1/2").is_err());
    assert!(c("redis://:1").is_err(), "no host");
    assert!(c("rediss://h:1").unwrap().tls.is_some());
    assert!(c("valkeys://h:1").unwrap().tls.is_some());
    let s = c("rediss-cluster://a:1,b:2/5").unwrap();
    assert_eq!(
        s.server,
        Server::Cluster(vec![("b".into(), 2), ("a".into(), 1)])
    );
    assert_eq!(s.database, None, "a Cluster has no databases");
    assert!(s.tls.is_some());
    let s = c(
        "redis-sentinel://a,b:2/1?sentinelServiceName=m&sentinelUsername=su&sentinelPassword=sp",
    )
    .unwrap();
    assert_eq!(s.database, Some(1));
    let Server::Sentinel {
        sentinels,
        service,
        username,
        password,
    } = s.server
    else {
        panic!("not sentinel");
    };
    assert_eq!(sentinels, vec![("b".into(), 2), ("a".into(), 26379)]);
    assert_eq!(service, "m");
    assert_eq!(username.as_deref(), Some("su"));
    assert_eq!(
        password.map(|p| p.expose().to_string()).as_deref(),
        Some("sp")
    );
    assert!(c("redis-cluster://a:1?node=b").is_err());
    // The flags override the URL's credentials.
    let mut o = opts("redis://u:p@h:1");
    o.username = Some("flag".into());
    o.password = Some(Secret::new("secret"));
    let (s, _) = config(&o).unwrap();
    assert_eq!(s.username.as_deref(), Some("flag"));
    assert_eq!(
        s.password.map(|p| p.expose().to_string()).as_deref(),
        Some("secret")
    );
}
