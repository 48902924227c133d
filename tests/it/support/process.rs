//! `sluice` as a child process: started with its JSON log on stderr, whose "sluice serving"
//! line names the bound addresses, stopped with SIGTERM (bounded wait) or killed on drop.

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value as Json;

use super::server::serve_argv;

/// Every stderr line of a child so far, collected by a thread.
pub type Log = Arc<Mutex<Vec<String>>>;

/// The addresses of the "sluice serving" log line: gRPC, HTTP, the Prometheus listener and
/// the debug listener.
type Serving = (
    Option<SocketAddr>,
    Option<SocketAddr>,
    Option<SocketAddr>,
    Option<SocketAddr>,
);

/// Spawns `cmd` (stdout discarded, stderr the JSON log) and waits for it to serve.
fn spawn_serving(cmd: &mut Command) -> (Child, Serving, Log) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice");
    let stderr = child.stderr.take().expect("stderr");
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let log = log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<Json>(&line) {
                    let f = &v["fields"];
                    if f["message"] == "sluice serving" {
                        let addr = |k: &str| f[k].as_str().and_then(|s| s.parse().ok());
                        let _ = tx.send((
                            addr("grpc"),
                            addr("http"),
                            addr("prometheus"),
                            addr("debug"),
                        ));
                    }
                }
                log.lock().unwrap().push(line);
            }
        });
    }
    // A generous bound so a broken start fails the test instead of hanging it.
    let serving = rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("sluice did not start; log: {:?}", log.lock().unwrap()));
    (child, serving, log)
}

/// Sends SIGTERM to `child`.
fn terminate(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill failed");
}

/// Waits for `child` to exit (bounded, so a hang fails the test) and returns its code.
// The bound guards against a hung child process in real time; it measures nothing.
#[allow(clippy::disallowed_methods)]
fn wait_exit(child: &mut Child, log: &Log) -> Option<i32> {
    for _ in 0..3_000 {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    panic!("sluice did not exit; log: {:?}", log.lock().unwrap());
}

/// Kills `child` if it still runs, and reaps it.
fn reap(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// `sluice serve` as a child process on free ports of 127.0.0.1.
pub struct Binary {
    pub child: Child,
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    /// Every stderr line so far (the JSON log), collected by a thread.
    pub log: Log,
}

impl Binary {
    /// Starts the binary with `--config config` and waits for its "sluice serving" log line,
    /// which names the bound addresses.
    pub fn start(config: &Path, flags: &[&str]) -> Binary {
        Binary::start_limited(config, flags, None)
    }

    /// [`Binary::start`] with at most `fd_limit` open file descriptors (`ulimit -n` in a shell
    /// that then execs sluice).
    pub fn start_limited(config: &Path, flags: &[&str], fd_limit: Option<u32>) -> Binary {
        Binary::start_under(config, flags, fd_limit.map(|n| format!("-n {n}")))
    }

    /// [`Binary::start`] with a soft open-file limit of `soft` (the hard one unchanged).
    pub fn start_soft_limited(config: &Path, flags: &[&str], soft: u32) -> Binary {
        Binary::start_under(config, flags, Some(format!("-Sn {soft}")))
    }

    /// [`Binary::start`] after `ulimit <ulimit>` in a shell that then execs sluice.
    fn start_under(config: &Path, flags: &[&str], ulimit: Option<String>) -> Binary {
        let exe = env!("CARGO_BIN_EXE_sluice");
        let mut cmd = match ulimit {
            None => Command::new(exe),
            Some(args) => {
                let mut c = Command::new("bash");
                c.arg("-c")
                    .arg(format!("ulimit {args} && exec \"$0\" \"$@\""))
                    .arg(exe);
                c
            }
        };
        cmd.args(serve_argv(config, &["--log-format", "json"]))
            .args(flags)
            .env_remove("RUST_LOG");
        let (child, (grpc, http, _, _), log) = spawn_serving(&mut cmd);
        Binary {
            child,
            grpc_addr: grpc.expect("grpc addr in log"),
            http_addr: http.expect("http addr in log"),
            log,
        }
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        terminate(&self.child);
    }

    /// Waits for the process to exit (bounded, so a hang fails the test) and returns its code.
    pub fn wait_exit(&mut self) -> Option<i32> {
        wait_exit(&mut self.child, &self.log)
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        reap(&mut self.child);
    }
}

/// `sluice` as a child process, with the addresses from its "sluice serving" JSON log line.
pub struct Spawned {
    pub child: Child,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    pub prometheus: Option<SocketAddr>,
    pub debug: Option<SocketAddr>,
    /// Every stderr line so far.
    pub log: Log,
}

/// Starts `sluice <args>` with `envs` on top of an empty environment (logs must be JSON: pass
/// `--log-format json` or `LOG_FORMAT=json`), and waits for it to serve.
pub fn spawn_sluice(args: &[&str], envs: &[(&str, &str)]) -> Spawned {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.args(args).env_clear().envs(envs.iter().copied());
    spawned(&mut cmd)
}

/// [`spawn_sluice`] with [`serve_argv`]`(config, flags)`.
pub fn spawn_serve(config: &Path, flags: &[&str], envs: &[(&str, &str)]) -> Spawned {
    let argv = serve_argv(config, flags);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    spawn_sluice(&argv, envs)
}

/// Starts sluice as Envoy Gateway runs envoyproxy/ratelimit: through a link named
/// `dir/ratelimit`, with no arguments, `envs` on top of an empty environment.
pub fn spawn_as_ratelimit(dir: &Path, envs: &[(&str, &str)]) -> Spawned {
    let link = dir.join("ratelimit");
    if !link.exists() {
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sluice"), &link).expect("link ratelimit");
    }
    let mut cmd = Command::new(&link);
    cmd.env_clear().envs(envs.iter().copied());
    spawned(&mut cmd)
}

fn spawned(cmd: &mut Command) -> Spawned {
    let (child, (grpc, http, prometheus, debug), log) = spawn_serving(cmd);
    Spawned {
        child,
        grpc: grpc.expect("grpc address"),
        http: http.expect("http address"),
        prometheus,
        debug,
        log,
    }
}

impl Spawned {
    /// Sends SIGTERM and waits (bounded) for the exit code.
    pub fn terminate_and_wait(&mut self) -> Option<i32> {
        terminate(&self.child);
        wait_exit(&mut self.child, &self.log)
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        reap(&mut self.child);
    }
}
