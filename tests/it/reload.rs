//! Hot reload by watching the config: a new file, then a broken one, then a fixed one, while a
//! client keeps sending requests. No request fails, answers follow the good configs, the
//! broken one is reported (log, `/rlconfig`, `sluice_config_loads_total{result="error"}`) and
//! leaves the running rules in place, and counters of unchanged rules keep their state. The
//! same through a Kubernetes ConfigMap's `..data` symlink swap. A rejected config's log line
//! says whether any rules are running. A config that vanishes
//! (emptied directory, dangling or looping symlink, unreadable file) is a failed load too,
//! unless `--allow-empty-config` asks for an empty config.

use crate::support;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use support::poll::eventually;
use support::prom_text::{parse_prometheus, sample};
use support::*;

fn config(rpu: u32) -> String {
    format!(
        r#"
domain: d
descriptors:
  - key: k
    rate_limit: {{unit: minute, requests_per_unit: {rpu}}}
  - key: keep
    rate_limit: {{unit: minute, requests_per_unit: 100000}}
"#
    )
}

/// Replaces `path` atomically, as editors and config management do.
fn replace(path: &Path, content: &str) {
    let tmp = path.with_file_name(".incoming.tmp");
    std::fs::write(&tmp, content).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The `requests_per_unit` the server answers for `k` now.
async fn limit_now(s: &Sluice) -> u32 {
    let r = s
        .call(req("d", vec![d(&[("k", "probe")])]).to_proto())
        .await
        .expect("answer");
    r.statuses[0]
        .current_limit
        .as_ref()
        .unwrap()
        .requests_per_unit
}

async fn limit_becomes(s: &Sluice, want: u32) {
    eventually(&format!("limit {want}"), || async {
        (limit_now(s).await == want).then_some(())
    })
    .await;
}

/// The load task: every answer's limit, and every error.
type Load = tokio::task::JoinHandle<(Vec<u32>, Vec<String>)>;

/// Sends requests until stopped; records every answer's limit, and every error.
fn spawn_load(s: &Sluice) -> (Arc<AtomicBool>, Load) {
    let stop = Arc::new(AtomicBool::new(false));
    let mut client = s.client.clone();
    let task = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut seen = Vec::new();
            let mut errors = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let r = req("d", vec![d(&[("k", "load")])]).to_proto();
                match client.should_rate_limit(r).await {
                    Ok(r) => seen.push(
                        r.into_inner().statuses[0]
                            .current_limit
                            .as_ref()
                            .map_or(0, |l| l.requests_per_unit),
                    ),
                    Err(e) => errors.push(format!("{e:?}")),
                }
                tokio::task::yield_now().await;
            }
            (seen, errors)
        })
    };
    (stop, task)
}

async fn keep_remaining(s: &Sluice) -> u32 {
    s.call(req("d", vec![d(&[("keep", "x")])]).to_proto())
        .await
        .expect("answer")
        .statuses[0]
        .limit_remaining
}

async fn run_sequence(s: &Sluice, write: &dyn Fn(&str)) {
    let (stop, load) = spawn_load(s);
    assert_eq!(keep_remaining(s).await, 99_999);

    write(&config(2000));
    limit_becomes(s, 2000).await;
    assert_eq!(keep_remaining(s).await, 99_998, "counters survive a reload");

    // Broken: a bad unit, reported with its position; the rules in use stay.
    write(&config(3000).replace("unit: minute, requests_per_unit: 3000", "unit: eon"));
    let body = eventually("the failed reload in /rlconfig", || async {
        let (code, body) = s.http_get("/rlconfig").await;
        (code == 200 && body.contains("last reload FAILED")).then_some(body)
    })
    .await;
    assert!(
        body.contains(":5:") && body.contains("invalid rate limit unit 'eon'"),
        "{body}"
    );
    assert_eq!(limit_now(s).await, 2000);
    assert_eq!(s.http_get("/healthcheck").await.0, 200);

    write(&config(3000));
    limit_becomes(s, 3000).await;
    assert_eq!(keep_remaining(s).await, 99_997);
    let body = s.http_get("/rlconfig").await.1;
    assert!(!body.contains("FAILED"), "{body}");
    assert!(body.contains("config generation 3"), "{body}");

    stop.store(true, Ordering::SeqCst);
    let (seen, errors) = load.await.unwrap();
    assert!(
        errors.is_empty(),
        "requests failed during reloads: {errors:?}"
    );
    assert!(!seen.is_empty());
    assert!(
        seen.iter().all(|l| [1000, 2000, 3000].contains(l)),
        "answers outside the good configs: {seen:?}"
    );
    // Answers move forward only: a request never sees an older rule set than the one before.
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");

    // The counters follow the swap (a request may see the new rules first): the generation
    // gauge is set last.
    let m = eventually("the reloads counted in /metrics", || async {
        let m = parse_prometheus(&s.http_get("/metrics").await.1);
        (sample(&m, "sluice_config_generation", &[]) == Some(3.0)).then_some(m)
    })
    .await;
    assert_eq!(
        sample(&m, "sluice_config_loads_total", &[("result", "error")]),
        Some(1.0)
    );
    assert_eq!(
        sample(&m, "sluice_config_loads_total", &[("result", "success")]),
        Some(3.0)
    );
    assert_eq!(sample(&m, "sluice_config_generation", &[]), Some(3.0));
    assert_eq!(
        sample(
            &m,
            "sluice_rate_limit_total_hits_total",
            &[("domain", "d"), ("key", "d.keep")]
        ),
        Some(3.0),
        "stats of an unchanged rule go on across reloads"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_changes_reload_and_broken_files_keep_the_rules() {
    let s = Sluice::start(StoreKind::Memory, Some(&config(1000)), &[]).await;
    assert_eq!(limit_now(&s).await, 1000);
    let path = s.config_path.clone();
    run_sequence(&s, &|c| replace(&path, c)).await;
    s.stop().await;
}

/// A mounted ConfigMap: `config.yaml -> ..data/config.yaml`, `..data -> ..<timestamp>`; an
/// update writes a new timestamped directory and renames a new `..data` symlink over the old.
struct ConfigMap {
    dir: std::path::PathBuf,
    version: Mutex<u32>,
}

impl ConfigMap {
    fn new(dir: &Path, content: &str) -> ConfigMap {
        let m = ConfigMap {
            dir: dir.to_path_buf(),
            version: Mutex::new(0),
        };
        m.update(content);
        std::os::unix::fs::symlink("..data/config.yaml", dir.join("config.yaml")).unwrap();
        m
    }

    fn update(&self, content: &str) {
        let mut v = self.version.lock().unwrap();
        *v += 1;
        let old = format!("..2026_11_01_00_00_{:02}.{}", *v - 1, *v - 1);
        let new = format!("..2026_11_01_00_00_{:02}.{}", *v, *v);
        std::fs::create_dir(self.dir.join(&new)).unwrap();
        std::fs::write(self.dir.join(&new).join("config.yaml"), content).unwrap();
        let tmp = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&new, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
        let _ = std::fs::remove_dir_all(self.dir.join(old));
    }
}

/// A server whose `--config` is `path` (a directory).
async fn start_on(path: &Path) -> Sluice {
    start_with(path, &[]).await
}

async fn start_with(path: &Path, flags: &[&str]) -> Sluice {
    let clock = sluice::clock::ManualClock::new(T0);
    let args = serve_args(path, StoreKind::Memory, flags);
    let server = sluice::app::start(args, Arc::new(clock.clone()))
        .await
        .expect("server starts");
    let client = sluice::proto::rate_limit_service_client::RateLimitServiceClient::new(
        channel(server.grpc_addr).await,
    );
    Sluice {
        server,
        clock,
        client,
        config_path: path.to_path_buf(),
        dir: tempfile::tempdir().unwrap(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_configmap_symlink_swap_reloads() {
    let root = tempfile::tempdir().unwrap();
    let mount = root.path().join("config");
    std::fs::create_dir(&mount).unwrap();
    let cm = ConfigMap::new(&mount, &config(1000));
    let s = start_on(&mount).await;
    assert_eq!(limit_now(&s).await, 1000);
    run_sequence(&s, &|c| cm.update(c)).await;
    // Each file loaded once, through the visible symlink.
    let body = s.http_get("/rlconfig").await.1;
    assert_eq!(body.matches("(domain d,").count(), 1, "{body}");
    s.stop().await;
}

/// How many JSON log lines of the binary carry `message`.
fn logged(log: &Mutex<Vec<String>>, message: &str) -> usize {
    log.lock()
        .unwrap()
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["fields"]["message"] == message)
        .count()
}

/// A rejected config's log line says whether rules are running: none after a bad first config
/// (not "keeping the running rules"), the previous ones after a bad reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_config_says_whether_rules_are_running() {
    const NONE_RUNNING: &str = "config rejected; no rules loaded yet, not serving";
    const KEEPING: &str = "config rejected; keeping the running rules";
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, "domain: d\ndescriptors: [").unwrap();
    let mut bin = Binary::start(dir.path(), &[]);
    let log = bin.log.clone();
    eventually("the first config rejected", || {
        let n = logged(&log, NONE_RUNNING);
        async move { (n == 1).then_some(()) }
    })
    .await;
    assert_eq!(logged(&log, KEEPING), 0);
    replace(&path, &config(5));
    eventually("a good config loaded", || {
        let n = logged(&log, "config loaded");
        async move { (n >= 1).then_some(()) }
    })
    .await;
    replace(&path, "domain: d\ndescriptors: [");
    eventually("the bad reload rejected", || {
        let n = logged(&log, KEEPING);
        async move { (n >= 1).then_some(()) }
    })
    .await;
    assert_eq!(logged(&log, NONE_RUNNING), 1);
    bin.terminate();
    assert_eq!(bin.wait_exit(), Some(0));
}

/// `sluice_config_loads_total{result}` now.
async fn loads(s: &Sluice, result: &str) -> f64 {
    let m = parse_prometheus(&s.http_get("/metrics").await.1);
    sample(&m, "sluice_config_loads_total", &[("result", result)]).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_config_is_a_failed_load_that_keeps_the_rules() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("config");
    std::fs::create_dir(&dir).unwrap();
    let file = dir.join("config.yaml");
    std::fs::write(&file, config(1000)).unwrap();
    let s = start_on(&dir).await;
    assert_eq!(limit_now(&s).await, 1000);
    let link = |target: &str| std::os::unix::fs::symlink(target, &file).unwrap();
    // (what is done to the only config file, what the failed load says)
    let cases: [(&str, &dyn Fn(), &str); 4] = [
        ("emptied directory", &|| (), "no config file found"),
        (
            "dangling symlink",
            &|| link("gone.yaml"),
            "No such file or directory",
        ),
        (
            "looping symlink",
            &|| link("config.yaml"),
            "Too many levels of symbolic links",
        ),
        // Unreadable whoever reads it, root included: reading its offset 0 fails with EIO.
        (
            "unreadable file",
            &|| link("/proc/self/mem"),
            "cannot read file",
        ),
    ];
    for (i, (case, break_it, says)) in cases.into_iter().enumerate() {
        let failed = i as f64 + 1.0;
        std::fs::remove_file(&file).unwrap();
        break_it();
        let body = eventually(&format!("{case}: the failed load in /rlconfig"), || async {
            let (code, body) = s.http_get("/rlconfig").await;
            (code == 200 && body.contains("last reload FAILED")).then_some(body)
        })
        .await;
        assert!(body.contains(says), "{case}: {body}");
        assert!(
            body.contains("(domain d,"),
            "{case}: the rules stay listed: {body}"
        );
        assert_eq!(
            limit_now(&s).await,
            1000 + i as u32,
            "{case}: still limited"
        );
        assert_eq!(loads(&s, "error").await, failed, "{case}");
        assert_eq!(s.http_get("/healthcheck").await.0, 200, "{case}");

        // Back to a good file: loads, and the next case starts from a clean status.
        let _ = std::fs::remove_file(&file);
        std::fs::write(&file, config(1001 + i as u32)).unwrap();
        limit_becomes(&s, 1001 + i as u32).await;
        let body = s.http_get("/rlconfig").await.1;
        assert!(!body.contains("FAILED"), "{case}: {body}");
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_empty_config_serves_no_rules_when_asked() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("config");
    std::fs::create_dir(&dir).unwrap();
    let file = dir.join("config.yaml");
    std::fs::write(&file, config(1000)).unwrap();
    let s = start_with(&dir, &["--allow-empty-config"]).await;
    assert_eq!(limit_now(&s).await, 1000);
    std::fs::remove_file(&file).unwrap();
    let body = eventually("the empty config loaded", || async {
        let (code, body) = s.http_get("/rlconfig").await;
        (code == 200 && body.contains("config generation 2")).then_some(body)
    })
    .await;
    assert!(!body.contains("FAILED"), "{body}");
    assert!(!body.contains("(domain d,"), "{body}");
    let r = s
        .call(req("d", vec![d(&[("k", "probe")])]).to_proto())
        .await
        .expect("answer");
    assert_eq!(r.statuses[0].current_limit, None, "no rule applies");
    assert_eq!(loads(&s, "error").await, 0.0);
    s.stop().await;
}
