//! A link's calls: a decision (in the tick's `FCALL`), a command (alone, or after `ASKING`),
//! each queued for the connection's task to write; waiting for the link to be up.

use super::*;

impl Link {
    /// Starts connecting on the calling task's runtime, in the background; the task ends when
    /// aborted (with the store). `batch`: the decisions of a tick may share one `FCALL` (on a
    /// Cluster node, where one call touches one slot, only those of one slot do).
    pub(in crate::store::redis) fn start(
        dial: Dial,
        stall: Duration,
        batch: bool,
    ) -> (Link, JoinHandle<()>) {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queued: Queued {
                    by_slot: !batch,
                    ..Queued::default()
                },
                ..State::default()
            }),
            wake: Notify::new(),
            batch,
        });
        let task = tokio::spawn(run(shared.clone(), dial, stall));
        (Link { shared }, task)
    }

    pub(in crate::store::redis) fn is_up(&self) -> bool {
        self.shared.lock().up
    }

    /// Decides `call` in the `FCALL` that carries every decision of this tick. An error reply
    /// is an `Ok(Frame::Error)`.
    pub(in crate::store::redis) async fn decide(
        &self,
        call: &Call<'_>,
        timeout: Duration,
    ) -> Result<Frame, CallError> {
        let rx = {
            let mut s = self.shared.lock();
            if !s.up {
                return Err(CallError::NotSent);
            }
            let first = s.out.is_empty() && s.queued.is_empty();
            let (tx, rx) = Reply::new(timeout);
            let earlier = s.arm(tx.deadline);
            s.queued.push(call, tx).map_err(CallError::Argument)?;
            if first || earlier {
                // Later decisions of this tick join the same FCALL.
                self.shared.wake.notify_one();
            }
            rx
        };
        wait(rx).await
    }

    /// Drops the connection (when up) and connects again.
    pub(in crate::store::redis) fn redial(&self) {
        self.shared.lock().redial = true;
        self.shared.wake.notify_one();
    }

    /// Sends `name args..` with the commands queued in this tick and waits for its reply (an
    /// error reply is an `Ok(Frame::Error)`).
    pub(in crate::store::redis) async fn call(
        &self,
        name: &str,
        args: &[Value],
        timeout: Duration,
    ) -> Result<Frame, CallError> {
        let rx = self.enqueue(None, name, args, timeout)?;
        wait(rx).await
    }

    /// [`Link::call`], an error reply as [`CallError::Reply`].
    pub(in crate::store::redis) async fn command(
        &self,
        name: &str,
        args: &[Value],
        timeout: Duration,
    ) -> Result<Frame, CallError> {
        match self.call(name, args, timeout).await? {
            Frame::Error(e) => Err(CallError::Reply(e)),
            f => Ok(f),
        }
    }

    /// `ASKING` then `name args..`, back to back on this connection (nothing can come between
    /// them: both are queued under one lock), the second's reply as [`Link::command`]'s: how
    /// a Cluster slot being imported is reached.
    pub(in crate::store::redis) async fn command_asking(
        &self,
        name: &str,
        args: &[Value],
        timeout: Duration,
    ) -> Result<Frame, CallError> {
        let rx = self.enqueue(Some(b"ASKING"), name, args, timeout)?;
        match wait(rx).await? {
            Frame::Error(e) => Err(CallError::Reply(e)),
            f => Ok(f),
        }
    }

    /// Queues `[before] name args..` for this tick's write: the receiver of `name`'s reply
    /// (`before`'s is not waited for).
    fn enqueue(
        &self,
        before: Option<&[u8]>,
        name: &str,
        args: &[Value],
        timeout: Duration,
    ) -> Result<Answer, CallError> {
        let mut s = self.shared.lock();
        if !s.up {
            return Err(CallError::NotSent);
        }
        let first = s.out.is_empty() && s.queued.is_empty();
        let start = s.out.len();
        if let Some(b) = before {
            resp::encode_strs(&mut s.out, &[b]);
        }
        if let Err(e) = resp::encode(&mut s.out, name, args) {
            s.out.truncate(start);
            return Err(CallError::Argument(e));
        }
        if before.is_some() {
            let (tx, _) = Reply::new(timeout);
            s.waiting.push_back(Waiter::One(tx));
            s.unsent += 1;
        }
        let (tx, rx) = Reply::new(timeout);
        let earlier = s.arm(tx.deadline);
        s.waiting.push_back(Waiter::One(tx));
        s.unsent += 1;
        if first || earlier {
            // Later commands of this tick join the same write.
            self.shared.wake.notify_one();
        }
        Ok(rx)
    }

    /// Waits until the link is up, at most `timeout`: whether it is.
    // Connection waits are real time, kept on tokio's timers.
    #[allow(clippy::disallowed_methods)]
    pub(in crate::store::redis) async fn wait_up(&self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        while !self.is_up() {
            if Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }
}

/// The answer to a call (its deadline is kept by the connection's task, see [`Reply`]).
async fn wait(rx: Answer) -> Result<Frame, CallError> {
    rx.await
        .unwrap_or_else(|_| Err(CallError::Lost("connection task ended".into(), new_drop())))
}
