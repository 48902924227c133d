//! Sentinel: a failover is followed.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_is_followed() {
    let (mut setup, replica) = sentinel_with_replica();
    let service = redis_support::SENTINEL_SERVICE;
    let store = connected(options(&setup.url(), Duration::from_millis(300))).await;
    let limit = roomy();
    let keys: Arc<Vec<Vec<u8>>> = Arc::new(
        (0..8)
            .map(|i| key_of("sentinel:", &i.to_string(), &limit))
            .collect(),
    );
    let load = Load::start(&store, keys, 4, Duration::from_millis(5));
    load.more(50).await;

    setup.master.kill();
    let killed = crate::support::poll::real_now();
    let want = replica.port.to_string();
    wait_until_async("the sentinel to promote the replica", || async {
        setup
            .sentinel
            .cli(&["SENTINEL", "get-master-addr-by-name", service])
            .contains(&want)
    })
    .await;
    let promoted = crate::support::poll::real_now();
    wait_until_async("calls to succeed on the new primary", || async {
        load.outcomes().iter().any(|o| o.ok && o.at > promoted)
    })
    .await;
    let outcomes = load.stop().await;
    let back = outcomes
        .iter()
        .filter(|o| o.ok && o.at > promoted)
        .map(|o| o.at)
        .min()
        .unwrap();
    eprintln!(
        "sentinel: promoted {:?} after the kill, calls back {:?} after that",
        promoted - killed,
        back - promoted
    );
    assert!(
        back - promoted <= Duration::from_secs(5),
        "back only after {:?}",
        back - promoted
    );
    assert!(replica.cli(&["ROLE"]).starts_with("master"));
}
