//! The queue of a link's decisions: encoded as they come, written as one `FCALL` per tick
//! (one per hash slot on a Cluster node).

use super::*;

/// Decisions waiting for the next write, already encoded: their keys, and per decision its
/// script's code followed (for `batch.lua`) by its key and argument counts and then by its
/// arguments (the layout of `batch`'s `ARGV`).
#[derive(Default)]
pub(super) struct Queued {
    pub(super) entries: Vec<QueuedCall>,
    pub(super) keys: Vec<u8>,
    pub(super) args: Vec<u8>,
    /// A Cluster node's queue: each decision's hash slot is kept, to write one `FCALL` per
    /// slot (a standalone queue does not pay for the hash).
    pub(super) by_slot: bool,
}

/// One queued decision: where its parts are in [`Queued`]'s buffers.
pub(super) struct QueuedCall {
    pub(super) id: ScriptId,
    pub(super) nkeys: usize,
    pub(super) keys: std::ops::Range<usize>,
    /// Its code, counts and arguments in `args`; its own arguments start at `own`.
    pub(super) args: std::ops::Range<usize>,
    pub(super) own: usize,
    pub(super) nargs: usize,
    /// As [`Batched::fast`].
    pub(super) fast: Option<Option<i64>>,
    /// Its (first) key's hash slot on a Cluster node's queue (else 0): the decisions of one
    /// slot may share a Cluster `FCALL`.
    pub(super) slot: u16,
    /// A fixed_window take a plain take may decide: its key's fingerprint and values.
    pub(super) plain: Option<(u64, plain::Args)>,
    pub(super) reply: Reply,
}

/// What [`Queued::push`] learns from encoding a decision.
pub(super) struct Parts<'c> {
    pub(super) nkeys: usize,
    pub(super) own: usize,
    pub(super) nargs: usize,
    pub(super) fast: Option<Option<i64>>,
    /// Its first key, whose hash slot a Cluster node's queue keeps.
    pub(super) first_key: Option<&'c [u8]>,
    pub(super) plain: Option<plain::Args>,
}

impl Queued {
    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds a decision.
    pub(super) fn push(&mut self, call: &Call<'_>, reply: Reply) -> Result<(), ArgumentError> {
        let (k, a) = (self.keys.len(), self.args.len());
        let parts = match call {
            Call::Fast(f) => Ok(self.encode_fast(f)),
            Call::Whole(args) => self.encode_whole(args),
        };
        let parts = match parts {
            Ok(p) => p,
            Err(e) => {
                self.keys.truncate(k);
                self.args.truncate(a);
                return Err(e);
            }
        };
        let slot = match parts.first_key {
            Some(key) if self.by_slot => crate::store::slot_tag::slot_of(key),
            _ => 0,
        };
        // Plain takes go on standalone and Sentinel connections only (with `batch`).
        let plain = parts
            .plain
            .filter(|_| !self.by_slot)
            .map(|a| (Plain::fingerprint(&self.keys[k..]), a));
        self.entries.push(QueuedCall {
            id: call.id(),
            nkeys: parts.nkeys,
            keys: k..self.keys.len(),
            args: a..self.args.len(),
            own: parts.own,
            nargs: parts.nargs,
            fast: parts.fast,
            slot,
            plain,
            reply,
        });
        Ok(())
    }

    /// A fast path's decision, its values encoded as they are (no argument list is built).
    pub(super) fn encode_fast<'c>(&mut self, f: &FastCall<'c>) -> Parts<'c> {
        resp::bulk_int(&mut self.args, i64::from(f.id.code()));
        let own = self.args.len();
        match f.now {
            Some(t) => resp::bulk_int(&mut self.args, t),
            None => resp::bulk(&mut self.args, b""),
        }
        for &n in f.ints() {
            resp::bulk_int(&mut self.args, n);
        }
        resp::bulk(&mut self.keys, f.key);
        Parts {
            nkeys: 1,
            own,
            nargs: 1 + f.ints().len(),
            fast: Some(f.now),
            first_key: Some(f.key),
            plain: (f.id == ScriptId::FixedWindow)
                .then(|| plain::Args::of(f.now, f.ints()))
                .flatten(),
        }
    }

    /// `batch.lua`'s decision from its `FCALL` argument list (`function numkeys KEYS.. ARGV..`):
    /// its key and argument counts, then its arguments.
    pub(super) fn encode_whole<'c>(
        &mut self,
        args: &'c [Value],
    ) -> Result<Parts<'c>, ArgumentError> {
        let nkeys = args
            .get(1)
            .and_then(Value::as_i64)
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| 2 + n <= args.len())
            .ok_or_else(|| ArgumentError("decision without its key count".into()))?;
        let (keys, argv) = args[2..].split_at(nkeys);
        resp::bulk_int(&mut self.args, i64::from(ScriptId::Decide.code()));
        resp::bulk_int(&mut self.args, nkeys as i64);
        resp::bulk_int(&mut self.args, argv.len() as i64);
        let own = self.args.len();
        resp::encode_args(&mut self.keys, keys)?;
        resp::encode_args(&mut self.args, argv)?;
        Ok(Parts {
            nkeys,
            own,
            nargs: argv.len(),
            fast: None,
            first_key: keys.first().and_then(Value::as_bytes),
            plain: None,
        })
    }

    /// Encodes what is queued into `out` and empties the queue: the takes `plain` may send
    /// plain after one `TIME`, then the rest as one command; their waiters join `waiting`.
    /// Whether it wrote anything. A decision whose caller has gone (its deadline passed while
    /// an `FCALL` was out) is left out: it would charge for an answer nobody reads.
    pub(super) fn write(
        &mut self,
        out: &mut Vec<u8>,
        plain: &Plain,
        waiting: &mut VecDeque<Waiter>,
    ) -> bool {
        let mut entries = std::mem::take(&mut self.entries);
        entries.retain(|e| !e.reply.is_closed());
        let mut takes = Vec::new();
        let now = plain.estimate();
        entries.retain_mut(|e| {
            let take = e
                .plain
                .zip(now)
                .and_then(|((fp, a), now)| plain.take(now, &self.keys[e.keys.clone()], fp, a));
            match take {
                Some(t) => {
                    // The entry is dropped: its caller's reply goes with the take.
                    let gone = Reply {
                        tx: None,
                        deadline: e.reply.deadline,
                    };
                    takes.push((std::mem::replace(&mut e.reply, gone), t));
                    false
                }
                None => true,
            }
        });
        let wrote = !takes.is_empty() || !entries.is_empty();
        if !takes.is_empty() {
            Plain::encode_time(out);
            waiting.push_back(Waiter::Time);
            let n = takes.len();
            for (i, (reply, take)) in takes.into_iter().enumerate() {
                Plain::encode_take(out, &take);
                waiting.push_back(Waiter::Plain {
                    reply,
                    take,
                    last: i + 1 == n && entries.is_empty(),
                });
            }
        }
        waiting.extend(self.encode(out, &mut entries));
        // Emptied, its capacity kept for the next batch.
        self.entries = entries;
        self.clear();
        wrote
    }

    /// Encodes what is queued into `out` as one command per hash slot (one script may touch
    /// one slot only: a Cluster node), the decisions of one slot in their order, and empties
    /// the queue; their waiters join `waiting`. A hot key's decisions still share one `FCALL`.
    pub(super) fn write_by_slot(&mut self, out: &mut Vec<u8>, waiting: &mut VecDeque<Waiter>) {
        let mut slots: Vec<(u16, Vec<QueuedCall>)> = Vec::new();
        for e in std::mem::take(&mut self.entries) {
            if e.reply.is_closed() {
                continue;
            }
            match slots.iter_mut().find(|(s, _)| *s == e.slot) {
                Some((_, same)) => same.push(e),
                None => slots.push((e.slot, vec![e])),
            }
        }
        for (_, mut entries) in slots {
            waiting.extend(self.encode(out, &mut entries));
        }
        self.clear();
    }

    /// `entries` as one command: an `FCALL` of the decision's function when alone, of `batch`
    /// when several.
    pub(super) fn encode(
        &self,
        out: &mut Vec<u8>,
        entries: &mut Vec<QueuedCall>,
    ) -> Option<Waiter> {
        if entries.len() <= 1 {
            return entries.pop().map(|e| self.fcall(out, e));
        }
        // FCALL batch numkeys KEYS.. count (code [nkeys nargs] ARGV.. | =)..
        let nkeys: usize = entries.iter().map(|e| e.nkeys).sum();
        let repeats = repeats(entries, &self.args);
        // Each decision's code, and batch.lua's two counts, before its arguments; a repeat
        // is its one `=`.
        let nargs: usize = entries
            .iter()
            .zip(&repeats)
            .map(|(e, &again)| match (again, e.fast.is_some()) {
                (true, _) => 1,
                (false, true) => 1 + e.nargs,
                (false, false) => 3 + e.nargs,
            })
            .sum();
        resp::command_header(out, 3 + nkeys + 1 + nargs);
        resp::bulk(out, b"FCALL");
        resp::bulk(out, LIBRARY.batch().as_bytes());
        resp::bulk_int(out, nkeys as i64);
        for e in entries.iter() {
            out.extend_from_slice(&self.keys[e.keys.clone()]);
        }
        resp::bulk_int(out, entries.len() as i64);
        for (e, again) in entries.iter().zip(repeats) {
            if again {
                resp::bulk(out, b"=");
            } else {
                out.extend_from_slice(&self.args[e.args.clone()]);
            }
        }
        let replies = entries
            .drain(..)
            .map(|e| Batched {
                reply: e.reply,
                fast: e.fast,
                plain: e.plain.map(|(fp, a)| (fp, a.window)),
            })
            .collect();
        Some(Waiter::Batch(replies))
    }

    /// `FCALL function numkeys KEYS.. ARGV..` of one decision.
    pub(super) fn fcall(&self, out: &mut Vec<u8>, e: QueuedCall) -> Waiter {
        resp::command_header(out, 3 + e.nkeys + e.nargs);
        resp::bulk(out, b"FCALL");
        resp::bulk(out, LIBRARY.function(e.id).as_bytes());
        resp::bulk_int(out, e.nkeys as i64);
        out.extend_from_slice(&self.keys[e.keys]);
        out.extend_from_slice(&self.args[e.own..e.args.end]);
        Waiter::Fcall(e.reply, e.plain.map(|(fp, a)| (fp, a.window)))
    }

    pub(super) fn clear(&mut self) {
        self.entries.clear();
        self.keys.clear();
        self.args.clear();
    }
}

/// Which decisions of a batch are sent as `=`: a fast path's whose script code and values
/// (`now` included) are those of the fast path's decision before it in the batch, so `batch`
/// reuses them and only its key travels (a thread's requests mostly hit one rule at one
/// instant: each repeat saves Redis parsing and interning its values).
pub(super) fn repeats(entries: &[QueuedCall], args: &[u8]) -> Vec<bool> {
    let mut last: Option<&[u8]> = None;
    entries
        .iter()
        .map(|e| {
            if e.fast.is_none() {
                return false;
            }
            let own = &args[e.args.clone()];
            let again = last == Some(own);
            last = Some(own);
            again
        })
        .collect()
}
