//! The Cluster path of a decision: one script call per slot, concurrently, each decided as if
//! the descriptors elsewhere pass; an optimistic charge given back when the request is rejected
//! elsewhere (the guarantees are in the parent module's documentation).

use super::*;

pub(crate) mod nodes;
pub(super) mod redirect;

impl Inner {
    /// Cluster: one script call per slot, concurrently; an optimistic charge undone when the
    /// request is rejected elsewhere.
    pub(super) async fn decide_cluster(
        &self,
        nodes: &Nodes,
        checks: &[Check<'_>],
        now: When,
        timeout: Duration,
    ) -> Result<Vec<Verdict>, StoreError> {
        // Parts by slot, each in request order; `index` maps back to the request.
        let mut parts: Vec<(u16, Vec<usize>)> = Vec::new();
        for (i, c) in checks.iter().enumerate() {
            let slot = slot_of(c.key);
            match parts.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, idx)) => idx.push(i),
                None => parts.push((slot, vec![i])),
            }
        }
        if parts.len() <= 1 {
            let Some(&(slot, _)) = parts.first() else {
                return Ok(Vec::new());
            };
            // One slot: the exact policy in one call.
            let reply = self
                .run_slot(nodes, slot, checks, Scope::All, now, timeout)
                .await?;
            return Ok(reply.verdicts());
        }

        let calls = parts.iter().map(|(slot, idx)| {
            let part: Vec<&Check<'_>> = idx.iter().map(|&i| &checks[i]).collect();
            async move {
                self.run_slot(nodes, *slot, &part, Scope::Part, now, timeout)
                    .await
            }
        });
        let replies = join_all(calls).await;

        let mut answers: Vec<Option<Answer>> = vec![None; checks.len()];
        let mut part_now: Vec<Option<Micros>> = vec![None; parts.len()];
        let mut failure = None;
        for (p, reply) in replies.into_iter().enumerate() {
            match reply {
                Ok(r) => {
                    part_now[p] = Some(r.now);
                    for (&i, a) in parts[p].1.iter().zip(r.answers) {
                        answers[i] = Some(a);
                    }
                }
                Err(e) => failure = Some(e),
            }
        }
        let forced = |c: &Check<'_>| c.charge == Charge::Always || c.ask.refund;
        let admitted = match &failure {
            // Some part did not answer: the request fails, so give back whatever the others
            // charged on its behalf (without waiting for it).
            Some(_) => false,
            None => admission(checks, |i| answers[i].is_some_and(|a| a.first_allowed)).0,
        };
        if admitted {
            return Ok(answers
                .into_iter()
                .map(|a| a.map(|a| a.verdict).unwrap_or(REJECTED))
                .collect());
        }

        // Rejected: every charge the policy would not have made is an optimistic one.
        let mut undo: Vec<(u16, Micros, Vec<usize>)> = Vec::new();
        for (p, (slot, idx)) in parts.iter().enumerate() {
            let Some(part_now) = part_now[p] else {
                continue;
            };
            let give_back: Vec<usize> = idx
                .iter()
                .copied()
                .filter(|&i| answers[i].is_some_and(|a| a.verdict.charged) && !forced(&checks[i]))
                .collect();
            if !give_back.is_empty() {
                undo.push((*slot, part_now, give_back));
            }
        }
        if let Some(e) = failure {
            if !undo.is_empty() {
                self.spawn_undo(nodes, checks, undo);
            }
            return Err(e);
        }
        let calls = undo.iter().map(|(slot, part_now, idx)| {
            let part: Vec<&Check<'_>> = idx.iter().map(|&i| &checks[i]).collect();
            async move {
                self.run_slot(
                    nodes,
                    *slot,
                    &part,
                    Scope::Undo,
                    When::at(*part_now, now.deadline),
                    timeout,
                )
                .await
            }
        });
        let undone = join_all(calls).await;
        for ((_, _, idx), reply) in undo.iter().zip(undone) {
            match reply {
                Ok(r) => {
                    for (&i, a) in idx.iter().zip(r.answers) {
                        answers[i] = Some(a);
                    }
                }
                Err(e) => {
                    // The verdict stands; the hits stay charged until the window ends.
                    tracing::warn!(
                        target: "sluice::store::redis",
                        error = %e,
                        "could not give back an optimistic charge"
                    );
                    for &i in idx {
                        if let Some(a) = &mut answers[i] {
                            a.verdict.charged = true;
                        }
                    }
                }
            }
        }
        Ok(answers
            .into_iter()
            .map(|a| a.map(|a| a.verdict).unwrap_or(REJECTED))
            .collect())
    }

    /// Gives back optimistic charges in the background (the request already failed).
    fn spawn_undo(
        &self,
        nodes: &Nodes,
        checks: &[Check<'_>],
        undo: Vec<(u16, Micros, Vec<usize>)>,
    ) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let timeout = self.command_timeout;
        let calls: Vec<(Link, Vec<Value>)> = undo
            .into_iter()
            .filter_map(|(slot, now, idx)| {
                let part: Vec<&Check<'_>> = idx.iter().map(|&i| &checks[i]).collect();
                let link = nodes.route(slot)?.links.next().clone();
                Some((link, script::fcall(&part, Scope::Undo, Some(now), now)))
            })
            .collect();
        rt.spawn(async move {
            for (link, args) in calls {
                let _ = fcall(&link, &args, timeout).await;
            }
        });
    }
}
