//! `sluice-bench noop`: the gRPC floor. An RLS server that answers OK at once, one status per
//! descriptor, with no matching and no store: what tonic, HTTP/2 and protobuf cost by
//! themselves on this machine, on the runtime layout chosen by `--runtime`.
//!
//! With `--seed-redis HOST:PORT` it is the Redis floor served over gRPC instead: each
//! descriptor is one call of a floor script, by default the seeds' fixed-window script
//! (bench/floors/fixed_window.lua: GET, compare, INCR, PEXPIRE on the first hit; a 60 s
//! window), or `--floor-script` with its `--floor-arg`s (another algorithm's floor), keyed by
//! the domain and the descriptor's entries (`domain|key=value|...`) and sent on sluice's own pipelined connection (one per runtime
//! thread, the commands of a tick in one write, as sluice's serving threads send theirs). What
//! Redis spends per decision behind it is the simplest script's cost under the same traffic as
//! sluice's.

use std::io::Write;
use std::net::SocketAddr;

use anyhow::Context;
use tokio::net::{TcpListener, TcpSocket};
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

use std::sync::Arc;
use std::time::Duration;

use sluice::proto::rate_limit_response::{Code, DescriptorStatus};
use sluice::proto::rate_limit_service_server::{RateLimitService, RateLimitServiceServer};
use sluice::proto::{RateLimitRequest, RateLimitResponse};
use sluice::store::redis::resp::{Frame, Value};
use sluice::store::redis::{ConnectOptions, PipelinedConnection};

/// How the noop server runs its runtime(s).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum RuntimeKind {
    /// One current-thread tokio runtime on one thread.
    Current,
    /// tokio's multi-thread runtime with `--threads` workers.
    Multi,
    /// `--threads` current-thread runtimes, each with its own SO_REUSEPORT listener.
    PerCore,
}

/// The seeds' fixed-window script (the floor of bench/floors.py), and its arguments.
const SEED_LUA: &str = include_str!("../../../bench/floors/fixed_window.lua");
const SEED_WINDOW_MS: i64 = 60_000;
const SEED_LIMIT: i64 = 1_000_000_000;

/// The floor a `--seed-redis` server calls per descriptor: on which Redis, which script with
/// which arguments after its one key.
#[derive(Clone, Debug)]
pub(crate) struct Floor {
    pub redis: String,
    pub script: String,
    pub args: Vec<String>,
}

impl Floor {
    /// The seeds' fixed-window script, or `script` (its source) with `args`.
    pub(crate) fn new(redis: String, script: Option<String>, args: Vec<String>) -> Floor {
        match script {
            Some(script) => Floor {
                redis,
                script,
                args,
            },
            None => Floor {
                redis,
                script: SEED_LUA.to_string(),
                args: vec![SEED_WINDOW_MS.to_string(), SEED_LIMIT.to_string()],
            },
        }
    }
}

/// A thread's floor: its connection, the script's SHA-1 and its arguments.
struct Loaded {
    pipeline: PipelinedConnection,
    sha: Value,
    args: Vec<Value>,
}

#[derive(Clone, Default)]
struct Noop {
    /// `--seed-redis`: this thread's connection and floor.
    seed: Option<Arc<Loaded>>,
}

impl Noop {
    /// The floor script for each descriptor, all sent in this tick's write; OK when it said 1.
    async fn seed(&self, request: &RateLimitRequest) -> Result<Vec<Code>, Status> {
        let Some(seed) = &self.seed else {
            return Ok(vec![Code::Ok; request.descriptors.len()]);
        };
        let Loaded {
            pipeline,
            sha,
            args: floor_args,
        } = &**seed;
        let calls = request.descriptors.iter().map(|d| {
            // What any RLS server's key must name: the domain and every entry's key and value
            // (values alone would mix descriptors and domains).
            let mut key = request.domain.as_bytes().to_vec();
            key.push(b'|');
            for e in &d.entries {
                key.extend_from_slice(&e.key);
                key.push(b'=');
                key.extend_from_slice(&e.value);
                key.push(b'|');
            }
            let mut args = vec![sha.clone(), Value::Integer(1), Value::Bytes(key.into())];
            args.extend(floor_args.iter().cloned());
            async move {
                match pipeline
                    .call("EVALSHA", &args, Duration::from_secs(1))
                    .await
                {
                    Ok(Frame::Integer(1)) => Ok(Code::Ok),
                    Ok(Frame::Integer(_)) => Ok(Code::OverLimit),
                    Ok(other) => Err(Status::internal(format!("floor script: {other:?}"))),
                    Err(e) => Err(Status::unavailable(e.to_string())),
                }
            }
        });
        futures::future::join_all(calls).await.into_iter().collect()
    }
}

/// Connects this thread's pipeline to the floor's Redis and loads its script there.
async fn seed_pipeline(floor: &Floor) -> anyhow::Result<Arc<Loaded>> {
    let addr = &floor.redis;
    let opts = ConnectOptions::for_url(format!("redis://{addr}"));
    let pipeline = PipelinedConnection::connect(&opts).map_err(|e| anyhow::anyhow!("{e}"))?;
    let start = tokio::time::Instant::now();
    while !pipeline.is_up() {
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(10),
            "no connection to Redis at {addr}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let load = [Value::from("LOAD"), Value::from(floor.script.as_str())];
    let sha = match pipeline.call("SCRIPT", &load, Duration::from_secs(5)).await {
        Ok(Frame::Bulk(Some(sha))) => Value::Bytes(sha.into()),
        other => anyhow::bail!("SCRIPT LOAD at {addr}: {other:?}"),
    };
    let args = floor.args.iter().map(|a| Value::from(a.as_str())).collect();
    Ok(Arc::new(Loaded {
        pipeline,
        sha,
        args,
    }))
}

#[tonic::async_trait]
impl RateLimitService for Noop {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        if self.seed.is_some() {
            let codes = self.seed(request.get_ref()).await?;
            let overall = if codes.contains(&Code::OverLimit) {
                Code::OverLimit
            } else {
                Code::Ok
            };
            let statuses = codes
                .into_iter()
                .map(|code| DescriptorStatus {
                    code: code as i32,
                    ..Default::default()
                })
                .collect();
            return Ok(Response::new(RateLimitResponse {
                overall_code: overall as i32,
                statuses,
                ..Default::default()
            }));
        }
        let n = request.get_ref().descriptors.len();
        let statuses = (0..n)
            .map(|_| DescriptorStatus {
                code: Code::Ok as i32,
                ..Default::default()
            })
            .collect();
        Ok(Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses,
            ..Default::default()
        }))
    }
}

/// Binds `addr` with SO_REUSEPORT (so more listeners can share the port) inside the current
/// runtime.
fn bind(addr: SocketAddr, reuseport: bool) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    if reuseport {
        socket.set_reuseport(true)?;
    }
    socket.set_nodelay(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without signal handlers the default action (exit) still stops the process.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

async fn serve(listener: TcpListener, seed: Option<&Floor>) -> anyhow::Result<()> {
    let noop = Noop {
        seed: match seed {
            Some(floor) => Some(seed_pipeline(floor).await?),
            None => None,
        },
    };
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .add_service(RateLimitServiceServer::new(noop))
        .serve_with_incoming_shutdown(incoming, shutdown_signal())
        .await
        .context("the noop server failed")
}

fn announce(addr: SocketAddr) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on {addr}")?;
    out.flush()?;
    Ok(())
}

pub(crate) fn run(
    addr: SocketAddr,
    runtime: RuntimeKind,
    threads: usize,
    seed: Option<Floor>,
) -> anyhow::Result<()> {
    match runtime {
        RuntimeKind::Current | RuntimeKind::Multi => {
            let rt = if runtime == RuntimeKind::Current {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?
            } else {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(threads)
                    .enable_all()
                    .build()?
            };
            rt.block_on(async {
                let listener = bind(addr, false).with_context(|| format!("cannot bind {addr}"))?;
                announce(listener.local_addr()?)?;
                serve(listener, seed.as_ref()).await
            })
        }
        RuntimeKind::PerCore => per_core(addr, threads, seed),
    }
}

/// One thread per listener, each a current-thread runtime; the first binds `addr` (port 0
/// picks one), the others bind the port it got. The kernel spreads connections over the
/// listeners by a hash of the 4-tuple, so use at least as many connections as threads.
fn per_core(addr: SocketAddr, threads: usize, seed: Option<Floor>) -> anyhow::Result<()> {
    let mut bound = addr;
    let mut handles = Vec::new();
    for n in 0..threads.max(1) {
        let (tx, rx) = std::sync::mpsc::channel::<anyhow::Result<SocketAddr>>();
        let want = bound;
        let seed = seed.clone();
        let handle = std::thread::Builder::new()
            .name(format!("noop-{n}"))
            .spawn(move || -> anyhow::Result<()> {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                rt.block_on(async move {
                    let listener = match bind(want, true) {
                        Ok(l) => l,
                        Err(e) => {
                            let _ = tx.send(Err(anyhow::anyhow!("cannot bind {want}: {e}")));
                            return Ok(());
                        }
                    };
                    let _ = tx.send(Ok(listener.local_addr()?));
                    serve(listener, seed.as_ref()).await
                })
            })?;
        bound = rx.recv().context("a listener thread died")??;
        handles.push(handle);
    }
    announce(bound)?;
    for h in handles {
        h.join()
            .map_err(|_| anyhow::anyhow!("a listener thread panicked"))??;
    }
    Ok(())
}
