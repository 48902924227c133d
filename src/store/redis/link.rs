//! A serving thread's own Redis connection: our RESP client, for the hot `EVALSHA` path only.
//!
//! Why not fred here: fred 10.1 flushes the socket after every `EVALSHA` (even inside a
//! pipeline), so each decision cost sluice a `writev` and Redis a read and an epoll wake-up
//! (bench/why.md). A link queues the encoded commands of every request its thread decides and
//! one task writes them all with one write when it next runs: on a current-thread runtime
//! that is after every request task woken in the same tick has queued its own. Replies come
//! back in order and are matched to their callers first in, first out.
//!
//! A link is "up" once connected, authenticated and named ([`super::dial`]); callers use the
//! shared pool whenever it is not, and a command that never left the queue when the
//! connection dropped is reported [`CallError::NotSent`], so it can be sent on the pool
//! instead: no request fails because a thread's own connection is down while the pool is up.
//! A command that was written is never sent again (it may have run).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use fred::types::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;

use super::dial::{Dial, Stream};
use super::resp::{self, ArgumentError, Frame};

/// How a call on a link failed.
#[derive(Debug)]
pub(super) enum CallError {
    /// The command was never written: safe to send elsewhere.
    NotSent,
    /// The connection was lost after the command was written: it may have run.
    Lost(String),
    /// No reply within the call's timeout (it may still run).
    Timeout,
    Argument(ArgumentError),
}

/// A handle to a link; clones share the connection.
#[derive(Clone)]
pub(super) struct Link {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the connection's task: commands were queued (or a reconnect was asked for).
    wake: Notify,
}

#[derive(Default)]
struct State {
    up: bool,
    /// Encoded commands not written yet.
    out: Vec<u8>,
    /// How many of `waiting`'s last entries are for commands still in `out`.
    unsent: usize,
    /// One per command written or queued, in order: the replies arrive in this order.
    waiting: VecDeque<oneshot::Sender<Result<Frame, CallError>>>,
    /// Drop the connection and dial again (it reached a server that is no primary).
    redial: bool,
}

/// Between reconnection attempts: the first at once, then doubling to at most this, so a
/// restarted Redis is found within a quarter second.
const MAX_RETRY: Duration = Duration::from_millis(250);

/// How often a failing connection attempt is logged at `warn` (every attempt at `debug`).
const WARN_EVERY: Duration = Duration::from_secs(5);

/// How often the connection checks that replies keep coming while commands wait.
const STALL_CHECK: Duration = Duration::from_millis(250);

impl Link {
    /// Starts connecting on the calling task's runtime, in the background; the task ends when
    /// aborted (with the store).
    pub(super) fn start(dial: Dial, stall: Duration) -> (Link, JoinHandle<()>) {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Notify::new(),
        });
        let task = tokio::spawn(run(shared.clone(), dial, stall));
        (Link { shared }, task)
    }

    pub(super) fn is_up(&self) -> bool {
        self.shared.lock().up
    }

    /// Drops the connection (when up) and connects again.
    pub(super) fn redial(&self) {
        self.shared.lock().redial = true;
        self.shared.wake.notify_one();
    }

    /// Sends `name args..` with the commands queued in this tick and waits for its reply (an
    /// error reply is an `Ok(Frame::Error)`).
    pub(super) async fn call(
        &self,
        name: &str,
        args: &[Value],
        timeout: Duration,
    ) -> Result<Frame, CallError> {
        let rx = {
            let mut s = self.shared.lock();
            if !s.up {
                return Err(CallError::NotSent);
            }
            let first = s.out.is_empty();
            resp::encode(&mut s.out, name, args).map_err(CallError::Argument)?;
            let (tx, rx) = oneshot::channel();
            s.waiting.push_back(tx);
            s.unsent += 1;
            if first {
                // Later commands of this tick join the same write.
                self.shared.wake.notify_one();
            }
            rx
        };
        match tokio::time::timeout(timeout, rx).await {
            Err(_) => Err(CallError::Timeout),
            Ok(Err(_)) => Err(CallError::Lost("connection task ended".into())),
            Ok(Ok(r)) => r,
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection is gone: callers of unwritten commands may go elsewhere, the others
    /// learn that theirs may have run.
    fn close(&self, why: &str) {
        let mut s = self.lock();
        s.up = false;
        s.redial = false;
        s.out.clear();
        let unsent = std::mem::take(&mut s.unsent);
        let written = s.waiting.len() - unsent;
        for (i, w) in s.waiting.drain(..).enumerate() {
            let e = if i < written {
                CallError::Lost(why.to_string())
            } else {
                CallError::NotSent
            };
            let _ = w.send(Err(e));
        }
    }
}

/// Marks the link down when its task ends (aborted with the store), so no caller waits on a
/// connection nobody serves.
struct Down(Arc<Shared>);

impl Drop for Down {
    fn drop(&mut self) {
        self.0.close("the store was dropped");
    }
}

/// Connects, serves, and connects again, for as long as the link exists.
async fn run(shared: Arc<Shared>, dial: Dial, stall: Duration) {
    let _down = Down(shared.clone());
    let mut delay = Duration::ZERO;
    let mut warned: Option<Instant> = None;
    loop {
        match dial.connect().await {
            Ok(stream) => {
                delay = Duration::ZERO;
                warned = None;
                {
                    let mut s = shared.lock();
                    s.up = true;
                    s.redial = false;
                }
                tracing::debug!(target: "sluice::store::redis", "thread connection up");
                let why = serve(&shared, stream, stall).await;
                tracing::debug!(target: "sluice::store::redis", reason = %why, "thread connection closed");
                shared.close(&why);
            }
            Err(e) => {
                if warned.is_none_or(|w| w.elapsed() >= WARN_EVERY) {
                    warned = Some(crate::clock::monotonic());
                    tracing::warn!(target: "sluice::store::redis", error = %e, "thread connection to redis failed (its requests use the shared pool); retrying");
                } else {
                    tracing::debug!(target: "sluice::store::redis", error = %e, "thread connection to redis failed");
                }
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).clamp(Duration::from_millis(20), MAX_RETRY);
    }
}

/// Writes what is queued and hands out replies until the connection fails; returns why.
async fn serve(shared: &Shared, mut stream: Stream, stall: Duration) -> String {
    let mut inbox: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut batch: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut check = tokio::time::interval(STALL_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut progress = crate::clock::monotonic();
    loop {
        {
            let mut s = shared.lock();
            if s.redial {
                return "asked to reconnect".into();
            }
            std::mem::swap(&mut s.out, &mut batch);
            s.unsent = 0;
        }
        if !batch.is_empty() {
            // One write for every command queued since the last: the point of the link.
            let written = async {
                stream.write_all(&batch).await?;
                stream.flush().await
            };
            if let Err(e) = written.await {
                return format!("write failed: {e}");
            }
            batch.clear();
        }
        tokio::select! {
            biased;
            _ = shared.wake.notified() => {}
            read = read_more(&mut stream, &mut inbox) => match read {
                Ok(0) => return "closed by redis".into(),
                Err(e) => return format!("read failed: {e}"),
                Ok(_) => {
                    progress = crate::clock::monotonic();
                    if let Err(e) = deliver(shared, &mut inbox) {
                        return e;
                    }
                }
            },
            _ = check.tick() => {
                if shared.lock().waiting.is_empty() {
                    progress = crate::clock::monotonic();
                } else if progress.elapsed() >= stall {
                    return format!("no reply for {stall:?}");
                }
            }
        }
    }
}

async fn read_more(stream: &mut Stream, inbox: &mut Vec<u8>) -> std::io::Result<usize> {
    inbox.reserve(8 * 1024);
    stream.read_buf(inbox).await
}

/// Hands every whole reply in `inbox` to its caller, in order.
fn deliver(shared: &Shared, inbox: &mut Vec<u8>) -> Result<(), String> {
    let mut at = 0;
    let mut s = shared.lock();
    while let Some((frame, used)) = resp::parse(&inbox[at..]).map_err(|e| e.to_string())? {
        at += used;
        match s.waiting.pop_front() {
            // A caller that gave up (timeout) is simply gone.
            Some(w) => drop(w.send(Ok(frame))),
            None => return Err("a reply that no command asked for".into()),
        }
    }
    drop(s);
    inbox.drain(..at);
    Ok(())
}
