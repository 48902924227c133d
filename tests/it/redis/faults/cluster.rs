//! A 6-node Cluster: a primary killed (errors per primary), a reshard under load.

use super::*;

/// Errors and calls per owning primary (by port), over `outcomes`.
fn per_node(outcomes: &[Outcome], owner: &[u16]) -> HashMap<u16, (usize, usize)> {
    let mut by: HashMap<u16, (usize, usize)> = HashMap::new();
    for o in outcomes {
        let e = by.entry(owner[o.key]).or_default();
        e.1 += 1;
        if !o.ok {
            e.0 += 1;
        }
    }
    by
}

/// The ports of the nodes that are primaries now (asked with `ROLE`, skipping dead ones).
fn primaries(cluster: &RedisCluster) -> Vec<u16> {
    cluster
        .nodes
        .iter()
        .filter(|n| ping(n.port) && n.cli(&["ROLE"]).starts_with("master"))
        .map(|n| n.port)
        .collect()
}

/// 60 keys of a roomy limit, spread over the slots, and the port of each one's primary.
fn spread_keys(cluster: &RedisCluster, prefix: &str) -> (Vec<Vec<u8>>, Vec<u16>) {
    let limit = roomy();
    let keys: Vec<Vec<u8>> = (0..60)
        .map(|i| key_of(prefix, &i.to_string(), &limit))
        .collect();
    let owner = keys.iter().map(|k| cluster.owner(k)).collect();
    (keys, owner)
}

/// Which connections `threads` says the load used: the own ones too, or only the pools. Both
/// send `FCALL`s; only the own ones name themselves (`CLIENT SETNAME`, [`CLIENT_NAME`]), so
/// a name given somewhere says one opened (the batching asserted beside says they carried
/// the calls). A dead node counts none.
///
/// [`CLIENT_NAME`]: sluice::store::redis::CLIENT_NAME
fn assert_path(cluster: &RedisCluster, threads: Option<usize>) {
    let named = cluster.command_calls("client|setname");
    match threads {
        None => assert_eq!(named, 0, "own connections without serving threads"),
        Some(_) => assert!(named > 0, "no serving thread opened its own connection"),
    }
}

/// Serving threads' requests on a Cluster, each one take of every `(key, limit)` of
/// `descriptors`: `threads` x `tasks` tasks each make `calls` requests; returns how many
/// were admitted. The decisions of one slot share `FCALL`s (one per slot and write).
fn requests_on_threads(
    store: &RedisStore,
    descriptors: Vec<(Vec<u8>, Limit)>,
    threads: usize,
    tasks: usize,
    calls: usize,
) -> usize {
    let descriptors = Arc::new(descriptors);
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let descriptors = descriptors.clone();
            on_serving_thread(store.clone(), move |store| async move {
                let mine: Vec<_> = (0..tasks)
                    .map(|_| {
                        let (store, descriptors) = (store.clone(), descriptors.clone());
                        tokio::spawn(async move {
                            let mut admitted = 0;
                            for _ in 0..calls {
                                let checks: Vec<Check<'_>> = descriptors
                                    .iter()
                                    .map(|(k, l)| Check::new(k, l, Ask::take(1)))
                                    .collect();
                                let v = store.decide_checks(&checks, T0, Deadline::NONE).await;
                                admitted += usize::from(v.unwrap().iter().all(|v| v.allowed));
                            }
                            admitted
                        })
                    })
                    .collect();
                let mut admitted = 0;
                for m in mine {
                    admitted += m.await.unwrap();
                }
                admitted
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_key_on_serving_threads_shares_fcalls_and_admits_exactly_its_limit() {
    let cluster = RedisCluster::start();
    let store = connected(options(&cluster.url(), Duration::from_millis(500))).await;
    let limit = Limit::fixed_window(500, 3_600 * SEC).unwrap();
    let key = key_of("hot:", "x", &limit);
    let (threads, tasks, calls) = (2, 8, 100);
    let admitted = tokio::task::spawn_blocking({
        let (store, key) = (store.clone(), key.clone());
        move || requests_on_threads(&store, vec![(key, limit)], threads, tasks, calls)
    })
    .await
    .unwrap();
    assert_eq!(admitted, 500);
    let calls_made = cluster.command_calls("fcall");
    eprintln!(
        "hot key: {calls_made} FCALLs for {} decisions",
        threads * tasks * calls
    );
    assert_path(&cluster, Some(threads));
    assert!(
        calls_made * 2 < (threads * tasks * calls) as u64,
        "{calls_made} calls for {} decisions: one slot's decisions did not share FCALLs",
        threads * tasks * calls
    );
}

/// The load of a test, on the store's pools (`None`) or on `Some(n)` serving threads, each
/// with its own connection per node (as a server's requests go).
fn load(
    store: &RedisStore,
    keys: Vec<Vec<u8>>,
    threads: Option<usize>,
    workers: usize,
    pause: Duration,
) -> Load {
    match threads {
        None => Load::start(store, Arc::new(keys), workers, pause),
        Some(n) => Load::on_threads(store, Arc::new(keys), n, workers, pause),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_cluster_primary_costs_only_its_own_slots() {
    killed_primary(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_cluster_primary_costs_only_its_own_slots_on_serving_threads() {
    killed_primary(Some(2)).await;
}

async fn killed_primary(threads: Option<usize>) {
    let mut cluster = RedisCluster::start();
    // Redis' default (`yes`) makes every node refuse every slot (CLUSTERDOWN) from the moment
    // the dead primary is marked failed until its replica is promoted: nothing a client can
    // route around. Operators who want healthy slots served set it to `no`.
    for n in &cluster.nodes {
        assert_eq!(
            n.cli(&["CONFIG", "SET", "cluster-require-full-coverage", "no"]),
            "OK"
        );
    }
    let store = connected(options(&cluster.url(), Duration::from_millis(300))).await;
    let (keys, owner) = spread_keys(&cluster, "kill:");
    let victim = owner[0];
    let load = load(&store, keys, threads, 6, Duration::from_millis(5));
    load.more(200).await;

    let killed_at = crate::support::poll::real_now();
    let victim_node = cluster.nodes.iter_mut().find(|n| n.port == victim).unwrap();
    victim_node.kill();
    // The replica takes over after the cluster node timeout (5 s here).
    let promoted = tokio::task::spawn_blocking({
        let ports: Vec<u16> = cluster.nodes.iter().map(|n| n.port).collect();
        move || {
            let start = crate::support::poll::real_now();
            loop {
                let masters = ports
                    .iter()
                    .filter(|&&p| ping(p) && redis_support::cli(p, &["ROLE"]).starts_with("master"))
                    .count();
                if masters == 3 {
                    return crate::support::poll::real_now();
                }
                assert!(
                    crate::support::poll::real_since(start) < Duration::from_secs(50),
                    "no replica promoted"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    })
    .await
    .unwrap();
    eprintln!("replica promoted {:?} after the kill", promoted - killed_at);
    wait_until_async("the dead primary's slots to answer again", || async {
        load.outcomes()
            .iter()
            .any(|o| o.ok && o.at > promoted && owner[o.key] == victim)
    })
    .await;
    load.more(200).await;
    let outcomes = load.stop().await;

    let during: Vec<Outcome> = outcomes
        .iter()
        .copied()
        .filter(|o| o.at >= killed_at)
        .collect();
    let by = per_node(&during, &owner);
    eprintln!("per primary (errors, calls) since the kill: {by:?}");
    let mut kinds: HashMap<(bool, &str), usize> = HashMap::new();
    for o in &during {
        if let Some(e) = o.error {
            *kinds.entry((owner[o.key] == victim, e)).or_default() += 1;
        }
    }
    eprintln!("errors by (on the dead primary, kind): {kinds:?}");
    for (port, (errors, calls)) in &by {
        if *port != victim {
            assert!(
                *errors * 100 <= *calls,
                "primary {port}: {errors} of {calls} calls failed while another primary died"
            );
        }
    }
    let back = during
        .iter()
        .filter(|o| o.ok && o.at > promoted && owner[o.key] == victim)
        .map(|o| o.at)
        .min()
        .unwrap();
    eprintln!(
        "dead primary's slots answered {:?} after the promotion",
        back - promoted
    );
    assert!(
        back - promoted <= Duration::from_secs(1),
        "the dead primary's slots answered {:?} after the promotion",
        back - promoted
    );
    assert_eq!(primaries(&cluster).len(), 3);
    assert_path(&cluster, threads);
}

/// Two descriptors per request, on two slots, from serving threads: each request's parts
/// share `FCALL`s with other requests' parts of their slot, and so do the refunds (`undo`) of
/// the part charged when the other part rejects. Admission is exact, and every optimistic
/// charge given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_over_two_slots_on_serving_threads_admit_exactly_and_give_back_every_charge() {
    let cluster = RedisCluster::start();
    let store = connected(options(&cluster.url(), Duration::from_millis(500))).await;
    let (roomy, tight) = (roomy(), Limit::fixed_window(300, 3_600 * SEC).unwrap());
    let (a, b) = (key_of("two:", "a", &roomy), key_of("two:", "b", &tight));
    let slot =
        |k: &[u8]| cluster.nodes[0].cli(&["CLUSTER", "KEYSLOT", std::str::from_utf8(k).unwrap()]);
    assert_ne!(slot(&a), slot(&b), "the two descriptors share a slot");
    let (threads, tasks, calls) = (2, 8, 100);
    let admitted = tokio::task::spawn_blocking({
        let store = store.clone();
        let descriptors = vec![(a.clone(), roomy), (b.clone(), tight)];
        move || requests_on_threads(&store, descriptors, threads, tasks, calls)
    })
    .await
    .unwrap();
    assert_eq!(admitted, 300);
    let stored = |k: &[u8]| cluster.fixed_window_state(k).map_or(0, |(_, n)| n);
    assert_eq!(stored(&b), 300, "the tight descriptor's count");
    assert_eq!(
        stored(&a),
        300,
        "optimistic charges of rejected requests were kept"
    );
    let calls_made = cluster.command_calls("fcall");
    // Two parts per request, and a refund per rejected one.
    let parts = threads * tasks * calls * 2 + (threads * tasks * calls - 300);
    eprintln!("two slots: {calls_made} FCALLs for {parts} parts");
    assert_path(&cluster, Some(threads));
    assert!(
        calls_made * 2 < parts as u64,
        "{calls_made} calls for {parts} parts: one slot's parts did not share FCALLs"
    );
}

/// A primary stalled (`DEBUG SLEEP`, shorter than the cluster node timeout: no failover) under
/// load on serving threads: a stall shorter than the command timeout fails nothing; a longer
/// one fails only the stalled primary's slots, which answer again within 100 ms of its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_cluster_primary_costs_only_its_own_slots_on_serving_threads() {
    let cluster = RedisCluster::start();
    let store = connected(options(&cluster.url(), Duration::from_millis(300))).await;
    let (keys, owner) = spread_keys(&cluster, "stall:");
    let victim = owner[0];
    let load = load(&store, keys, Some(2), 6, Duration::from_millis(2));
    load.more(200).await;

    let before = load.outcomes().len();
    debug_sleep(victim, "0.1").await;
    load.more(100).await;
    let short = &load.outcomes()[before..];
    let failed = short.iter().filter(|o| !o.ok).count();
    assert_eq!(
        failed, 0,
        "{failed} calls failed in a stall shorter than the timeout"
    );
    assert!(!load.opened.load(Ordering::Relaxed), "a breaker opened");

    let started = crate::support::poll::real_now();
    let ended = debug_sleep(victim, "1.5").await;
    load.more(300).await;
    let outcomes = load.stop().await;
    let during: Vec<Outcome> = outcomes
        .iter()
        .copied()
        .filter(|o| o.at >= started && o.at <= ended)
        .collect();
    let by = per_node(&during, &owner);
    eprintln!("per primary (errors, calls) during the stall: {by:?}");
    for (port, (errors, calls)) in &by {
        if *port != victim {
            assert!(
                *calls > 0,
                "primary {port} answered nothing during the stall"
            );
            assert!(
                *errors * 100 <= *calls,
                "primary {port}: {errors} of {calls} calls failed while another stalled"
            );
        }
    }
    assert!(
        by.get(&victim).is_some_and(|&(errors, _)| errors > 0),
        "a stall longer than the timeout fails the stalled primary's calls"
    );
    let late = recovered(&outcomes, ended, |o| owner[o.key] == victim);
    eprintln!("the stalled primary's slots answered {late:?} after the stall ended");
    assert!(
        late <= Duration::from_millis(100),
        "recovered {late:?} after the stall ended"
    );
    assert_path(&cluster, Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reshard_under_load_fails_almost_nothing_and_never_stalls() {
    reshard(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reshard_under_load_fails_almost_nothing_and_never_stalls_on_serving_threads() {
    reshard(Some(2)).await;
}

async fn reshard(threads: Option<usize>) {
    let cluster = RedisCluster::start();
    let store = connected(options(&cluster.url(), Duration::from_millis(500))).await;
    let limit = roomy();
    let keys: Vec<Vec<u8>> = (0..300)
        .map(|i| key_of("reshard:", &i.to_string(), &limit))
        .collect();
    let load = load(&store, keys, threads, 6, Duration::from_millis(2));
    load.more(200).await;

    let masters = primaries(&cluster);
    let id = |port: u16| redis_support::cli(port, &["CLUSTER", "MYID"]);
    let (from, to) = (id(masters[0]), id(masters[1]));
    let seed = format!("127.0.0.1:{}", masters[0]);
    let out = tokio::task::spawn_blocking(move || {
        Command::new("redis-cli")
            .args(["--cluster", "reshard", &seed])
            .args(["--cluster-from", &from, "--cluster-to", &to])
            .args(["--cluster-slots", "1500", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli --cluster reshard")
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "reshard failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    load.more(300).await;
    let outcomes = load.stop().await;
    let failed = outcomes.iter().filter(|o| !o.ok).count();
    let slowest = outcomes.iter().map(|o| o.took).max().unwrap();
    eprintln!(
        "reshard: {failed} of {} calls failed; slowest call {slowest:?}",
        outcomes.len()
    );
    assert!(
        failed * 1000 <= outcomes.len(),
        "{failed} of {} calls failed",
        outcomes.len()
    );
    assert!(slowest <= Duration::from_secs(1), "a call took {slowest:?}");
    assert_path(&cluster, threads);
}

// ---------------------------------------------------------------------------------------------
// Sentinel: the primary killed, its replica promoted.
// ---------------------------------------------------------------------------------------------
