//! A link's connection task: dials, writes what is queued, hands replies to their callers
//! in order, and dials again when the connection fails.

use super::*;

/// Connects, serves, and connects again, for as long as the link exists.
// Callers' deadlines, stalls and redirect pauses are real time, kept on tokio's timers.
#[allow(clippy::disallowed_methods)]
pub(super) async fn run(shared: Arc<Shared>, dial: Dial, stall: Duration) {
    let _down = Down(shared.clone());
    let mut delay = Duration::ZERO;
    let mut warned: Option<std::time::Instant> = None;
    loop {
        match dial.connect().await {
            Ok(mut stream) => {
                match dial.load_library(&mut stream).await {
                    Ok(()) => {}
                    Err(LoadError::Refused(e)) => {
                        // Every decision is an FCALL of the library: without it, no link is
                        // up, the store is not ready, and decisions fail as an outage.
                        if warned.is_none_or(|w| w.elapsed() >= WARN_EVERY) {
                            warned = Some(crate::clock::monotonic());
                            tracing::error!(target: "sluice::store::redis", error = %e, "redis refused sluice's function library (FUNCTION LOAD): sluice needs Redis 7.0+ or Valkey 7.2+, and an ACL allowing FUNCTION and FCALL; not ready, retrying");
                        }
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).clamp(Duration::from_millis(20), MAX_RETRY);
                        continue;
                    }
                    Err(LoadError::Failed(e)) => {
                        tracing::debug!(target: "sluice::store::redis", error = %e, "connection lost while loading the function library");
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).clamp(Duration::from_millis(20), MAX_RETRY);
                        continue;
                    }
                }
                delay = Duration::ZERO;
                warned = None;
                {
                    let mut s = shared.lock();
                    s.up = true;
                    s.redial = false;
                    s.send_carried();
                }
                tracing::debug!(target: "sluice::store::redis", "thread connection up");
                let why = serve(&shared, stream, stall).await;
                tracing::debug!(target: "sluice::store::redis", reason = %why, "thread connection closed");
                shared.close(&why);
            }
            Err(e) => {
                if warned.is_none_or(|w| w.elapsed() >= WARN_EVERY) {
                    warned = Some(crate::clock::monotonic());
                    tracing::warn!(target: "sluice::store::redis", error = %e, "thread connection to redis failed (its requests use the shared links); retrying");
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
// Callers' deadlines, stalls and redirect pauses are real time, kept on tokio's timers.
#[allow(clippy::disallowed_methods)]
pub(super) async fn serve(shared: &Shared, mut stream: Stream, stall: Duration) -> String {
    let mut inbox: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut batch: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut check = tokio::time::interval(STALL_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut progress = crate::clock::monotonic();
    // The callers' deadlines: armed at the earliest one the task knows of (see `Reply`).
    let mut expiry = pin!(tokio::time::sleep_until(Instant::now()));
    let mut armed: Option<Instant> = None;
    let mut woken = false;
    loop {
        {
            let mut s = shared.lock();
            if s.redial {
                return "asked to reconnect".into();
            }
            if s.timer != armed {
                armed = s.timer;
                if let Some(t) = armed {
                    expiry.as_mut().reset(t);
                }
            }
            std::mem::swap(&mut s.out, &mut batch);
            // After the commands queued before it, as its waiter comes after theirs. One FCALL
            // of decisions at a time: what is queued while one is out leaves, as one, when its
            // reply is in. Redis then wakes once per round trip rather than once per tick, at
            // most one round trip later for a decision queued just after a write.
            let s = &mut *s;
            if !shared.batch {
                s.queued.write_by_slot(&mut batch, &mut s.waiting);
            } else if !s.fcall_in_flight && s.queued.write(&mut batch, &s.plain, &mut s.waiting) {
                s.fcall_in_flight = true;
            }
            s.unsent = 0;
        }
        if !batch.is_empty() {
            // One write for every command queued since the last: the point of the link.
            // Deadlines still pass while Redis reads nothing (a full socket buffer).
            let mut written = pin!(async {
                stream.write_all(&batch).await?;
                stream.flush().await
            });
            let began = crate::clock::monotonic();
            let written = loop {
                tokio::select! {
                    biased;
                    w = &mut written => break w,
                    // A caller with an earlier deadline than the timer's (the wake-up is
                    // consumed here: the loop goes round once more after the write).
                    _ = shared.wake.notified() => {
                        woken = true;
                        let t = shared.lock().timer;
                        if t != armed {
                            armed = t;
                            if let Some(t) = t {
                                expiry.as_mut().reset(t);
                            }
                        }
                    }
                    _ = &mut expiry, if armed.is_some() => {
                        armed = shared.lock().expire();
                        if let Some(t) = armed {
                            expiry.as_mut().reset(t);
                        }
                    }
                    _ = check.tick() => {
                        if began.elapsed() >= stall {
                            return format!("no write for {stall:?}");
                        }
                    }
                }
            };
            if let Err(e) = written {
                return format!("write failed: {e}");
            }
            batch.clear();
            if std::mem::take(&mut woken) {
                continue;
            }
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
            _ = &mut expiry, if armed.is_some() => {
                armed = shared.lock().expire();
                if let Some(t) = armed {
                    expiry.as_mut().reset(t);
                }
            }
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

/// Whether Redis refused the `FCALL` itself, so that it ran nothing and its decisions may go
/// elsewhere (a shared link), and sets the connection right: the library is not on the server
/// (`FUNCTION FLUSH`, a server restarted with an old dataset): reconnect, which loads it
/// again. Each `FCALL` written meanwhile (one with `batch`, several on a Cluster node) is
/// refused alike, and so sent elsewhere: none of them ran. Any other error reply (an ACL
/// refusing `FCALL` itself, `NOPERM`) is the decisions' answer.
pub(super) fn fcall_refused(s: &mut State, f: &Frame) -> bool {
    let Frame::Error(e) = f else { return false };
    if e.contains("Function not found") {
        s.redial = true;
        true
    } else {
        false
    }
}

/// Each decision's answer from a `batch` reply (see `functions.lua`): a fast path's three
/// integers become the reply its script gives (`now flags remaining reset`), `now` being the
/// one it was given or the batch's clock. `None` if the reply is not of that layout.
pub(super) fn unbatch(items: Vec<Frame>, ws: &[Batched]) -> Option<Vec<Frame>> {
    let mut items = items.into_iter();
    let Some(Frame::Integer(clock)) = items.next() else {
        return None;
    };
    let mut answers = Vec::with_capacity(ws.len());
    for w in ws {
        let first = items.next()?;
        answers.push(match (w.fast, first) {
            (_, e @ Frame::Error(_)) | (None, e) => e,
            (Some(now), Frame::Integer(flags)) => {
                let (Some(Frame::Integer(rem)), Some(Frame::Integer(reset))) =
                    (items.next(), items.next())
                else {
                    return None;
                };
                let now = Frame::Integer(now.unwrap_or(clock));
                let ints = [
                    now,
                    Frame::Integer(flags),
                    Frame::Integer(rem),
                    Frame::Integer(reset),
                ];
                Frame::Array(Some(ints.into()))
            }
            (Some(_), _) => return None,
        });
    }
    items.next().is_none().then_some(answers)
}

/// A fixed_window script's answer (`now flags remaining reset`) for a key a plain take may
/// decide next: Redis' clock, and the key if charged (full if that left nothing) or rejected
/// (one hit rejected: the count is at the limit).
pub(super) fn learn(plain: &mut Plain, fingerprint: u64, window: i64, answer: &Frame) {
    let Frame::Array(Some(a)) = answer else {
        return;
    };
    if let [Frame::Integer(now), Frame::Integer(flags), Frame::Integer(rem), Frame::Integer(reset)] =
        a[..]
    {
        plain.saw_clock(now);
        if flags & 2 != 0 || flags == 0 {
            plain.learn(fingerprint, window, now, reset, flags & 2 == 0 || rem == 0);
        }
    }
}

pub(super) async fn read_more(stream: &mut Stream, inbox: &mut Vec<u8>) -> std::io::Result<usize> {
    inbox.reserve(8 * 1024);
    stream.read_buf(inbox).await
}

/// Hands every whole reply in `inbox` to its caller, in order.
pub(super) fn deliver(shared: &Shared, inbox: &mut Vec<u8>) -> Result<(), String> {
    let mut at = 0;
    let mut s = shared.lock();
    while let Some((frame, used)) = resp::parse(&inbox[at..]).map_err(|e| e.to_string())? {
        at += used;
        // A caller that gave up (timeout) is simply gone.
        match s.waiting.pop_front() {
            Some(Waiter::One(mut w) | Waiter::Mend(mut w, ..)) => w.send(Ok(frame)),
            Some(Waiter::Carried(_)) => {}
            Some(Waiter::Fcall(mut w, plain)) => {
                s.fcall_in_flight = false;
                if fcall_refused(&mut s, &frame) {
                    w.send(Err(CallError::NotSent));
                } else {
                    if let Some((fp, window)) = plain {
                        learn(&mut s.plain, fp, window, &frame);
                    }
                    w.send(Ok(frame));
                }
            }
            Some(Waiter::Time) => {
                // Not a clock (an error): the write's plain takes are decided again.
                s.plain.saw_time(&frame);
            }
            Some(Waiter::Plain {
                mut reply,
                take,
                last,
            }) => {
                if last {
                    s.fcall_in_flight = false;
                }
                let s = &mut *s;
                match s.plain.decide(&take, &frame) {
                    // Refused (a replica, out of memory): nothing ran.
                    None => reply.send(Ok(frame)),
                    Some(PlainReply::Answer(a)) => reply.send(Ok(a)),
                    // Sent even when its caller has gone: the take's hit is in Redis.
                    Some(PlainReply::Mend(what)) => {
                        Plain::encode_mend(&mut s.out, LIBRARY.mend(), &take, what);
                        s.waiting.push_back(Waiter::Mend(reply, take, what));
                        s.unsent += 1;
                    }
                }
            }
            Some(Waiter::Batch(ws)) => match frame {
                Frame::Error(_) if fcall_refused(&mut s, &frame) => {
                    s.fcall_in_flight = false;
                    for mut w in ws {
                        w.reply.send(Err(CallError::NotSent));
                    }
                }
                // The call as a whole failed (a replica, a script killed): each decision
                // learns why.
                Frame::Error(e) => {
                    s.fcall_in_flight = false;
                    for mut w in ws {
                        w.reply.send(Ok(Frame::Error(e.clone())));
                    }
                }
                frame => {
                    let n = ws.len();
                    let answers = match frame {
                        Frame::Array(Some(items)) => unbatch(items, &ws),
                        _ => None,
                    }
                    .ok_or_else(|| format!("a batch of {n} answered out of its layout"))?;
                    s.fcall_in_flight = false;
                    for (mut w, a) in ws.into_iter().zip(answers) {
                        if let Some((fp, window)) = w.plain {
                            learn(&mut s.plain, fp, window, &a);
                        }
                        w.reply.send(Ok(a));
                    }
                }
            },
            None => return Err("a reply that no command asked for".into()),
        }
    }
    drop(s);
    inbox.drain(..at);
    Ok(())
}
