//! Reservation records in Redis ([`Reservations`]): `SET key record PX ttl` to hold one, `GET`
//! to read it, and the decision script's `settle` scope to apply a settlement and delete the
//! record in one atomic call (never `GETDEL` first: a settlement that then failed would be
//! lost with its record). On a Cluster each command follows redirections in the one loop of
//! [`super::cluster::redirect`]. The record's key carries the hash tag of its first counter's slot,
//! so on Cluster that counter settles with it; a counter in another slot settles with a claim
//! held there beside the record.

use bytes::Bytes;

use super::errors::{error, from_call};
use super::resp::{Frame, Value};
use super::script::Scope;
use super::{breaker_open, record, ClockSource, Inner, Links, RedisStore, When};
use crate::model::{Micros, MICROS_PER_MILLI};
use crate::store::slot_tag::slot_of;
use crate::store::{key, Check, Deadline, ErrorKind, Reservations, StoreError};

impl Reservations for RedisStore {
    async fn hold(
        &self,
        key: &[u8],
        record: Vec<u8>,
        counters: &[&[u8]],
        expires_at: Micros,
        now: Micros,
        deadline: Deadline,
    ) -> Result<(), StoreError> {
        // Whole milliseconds, rounded up: a record never expires before its ttl.
        let ms = ((expires_at - now).max(1) + MICROS_PER_MILLI - 1) / MICROS_PER_MILLI;
        let set = |key: &[u8], value: Bytes| {
            vec![
                Value::Bytes(Bytes::copy_from_slice(key)),
                Value::Bytes(value),
                Value::from("PX"),
                Value::Integer(ms),
            ]
        };
        // Cluster: a claim in each other slot of the counters (see `settle`), before the
        // record, so that a record held always has its claims.
        for claim in self.inner.claims(key, counters) {
            self.inner
                .command(
                    "SET",
                    &claim,
                    set(&claim, Bytes::from_static(b"1")),
                    deadline,
                )
                .await?;
        }
        self.inner
            .command("SET", key, set(key, record.into()), deadline)
            .await?;
        Ok(())
    }

    async fn read(
        &self,
        key: &[u8],
        _: Micros,
        deadline: Deadline,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let args = vec![Value::Bytes(Bytes::copy_from_slice(key))];
        match self.inner.command("GET", key, args, deadline).await? {
            Frame::Bulk(None) => Ok(None),
            Frame::Bulk(Some(b)) | Frame::Simple(b) => Ok(Some(b)),
            other => Err(error(ErrorKind::Script, format!("GET answered {other:?}"))),
        }
    }

    /// One `settle` script call per slot: the checks of the record's slot with the record
    /// (last, replaced by `marker`), those of each other slot (Cluster, a reservation over
    /// several descriptors) with that slot's claim (dropped), first. Each call applies its
    /// checks and replaces or drops its claim, or changes nothing; a call whose claim is gone
    /// (or a marker) was applied before (a retry after a partial failure skips it). Of two
    /// settles racing over several slots, each slot is applied once and one of them is
    /// answered OK; the other finds a marker in the record's place.
    async fn settle(
        &self,
        key: &[u8],
        checks: &[Check<'_>],
        marker: &[u8],
        now: Micros,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        let inner = &*self.inner;
        let when = When {
            script: match inner.clock {
                ClockSource::Redis => None,
                ClockSource::Local => Some(now),
            },
            local: now,
            deadline,
        };
        let timeout = inner.timeout(deadline);
        match &inner.links {
            Links::Shared(set) => {
                if !inner.breaker.allows() {
                    return Err(breaker_open());
                }
                let result = inner
                    .run(
                        set.next(),
                        checks,
                        Scope::Settle(key, marker),
                        when,
                        timeout,
                    )
                    .await;
                record(&inner.breaker, &result);
                Ok(!result?.unclaimed())
            }
            Links::Cluster(nodes) => {
                let home = slot_of(key);
                let mut parts: Vec<(u16, Vec<&Check<'_>>)> = Vec::new();
                for c in checks {
                    let slot = slot_of(c.key);
                    match parts.iter_mut().find(|(s, _)| *s == slot) {
                        Some((_, part)) => part.push(c),
                        None => parts.push((slot, vec![c])),
                    }
                }
                for (slot, part) in parts.iter().filter(|(s, _)| *s != home) {
                    let claim = key::reservation_claim(key, *slot);
                    inner
                        .run_slot(
                            nodes,
                            *slot,
                            part,
                            Scope::Settle(&claim, b""),
                            when,
                            timeout,
                        )
                        .await?;
                }
                let part: Vec<&Check<'_>> = parts
                    .into_iter()
                    .find(|(s, _)| *s == home)
                    .map(|(_, p)| p)
                    .unwrap_or_default();
                let reply = inner
                    .run_slot(
                        nodes,
                        home,
                        &part,
                        Scope::Settle(key, marker),
                        when,
                        timeout,
                    )
                    .await?;
                Ok(!reply.unclaimed())
            }
        }
    }

    async fn drop_marker(&self, key: &[u8], deadline: Deadline) -> Result<(), StoreError> {
        let args = vec![Value::Bytes(Bytes::copy_from_slice(key))];
        self.inner.command("DEL", key, args, deadline).await?;
        Ok(())
    }
}

impl Inner {
    /// Cluster: the claims a record at `key` keeps in the other slots of `counters`.
    fn claims(&self, key: &[u8], counters: &[&[u8]]) -> Vec<Vec<u8>> {
        if !matches!(self.links, Links::Cluster(_)) {
            return Vec::new();
        }
        let home = slot_of(key);
        let mut slots: Vec<u16> = counters.iter().map(|c| slot_of(c)).collect();
        slots.retain(|&s| s != home);
        slots.sort_unstable();
        slots.dedup();
        slots
            .into_iter()
            .map(|s| key::reservation_claim(key, s))
            .collect()
    }

    /// One command on `key`, behind the breaker of the node it goes to.
    async fn command(
        &self,
        name: &'static str,
        key: &[u8],
        args: Vec<Value>,
        deadline: Deadline,
    ) -> Result<Frame, StoreError> {
        let timeout = self.timeout(deadline);
        match &self.links {
            Links::Shared(set) => {
                if !self.breaker.allows() {
                    return Err(breaker_open());
                }
                let result = set
                    .next()
                    .command(name, &args, timeout)
                    .await
                    .map_err(from_call);
                record(&self.breaker, &result);
                result
            }
            // Through the one redirect loop, as decisions are ([`Inner::follow`]).
            Links::Cluster(nodes) => {
                let slot = slot_of(key);
                let args = &args;
                self.follow(nodes, slot, timeout, move |node, route, left| async move {
                    let link = node.links.next().clone();
                    let result = if route.asking {
                        link.command_asking(name, args, left).await
                    } else {
                        link.command(name, args, left).await
                    };
                    (result, None)
                })
                .await
            }
        }
    }
}
