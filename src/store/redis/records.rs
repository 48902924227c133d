//! Reservation records in Redis ([`Reservations`]): `SET key record PX ttl` to hold one,
//! `GETDEL key` to claim it (atomic in Redis: of two claims, one gets the record). Redis 6.2
//! or newer. The record's key carries its own hash tag, so on Cluster it is one call to the
//! slot's primary, `MOVED` followed as the scripts' calls are.

use std::time::Duration;

use bytes::Bytes;
use fred::prelude::{Client, ClientLike, Options};
use fred::types::{ClusterHash, CustomCommand, Value};
use fred::util::redis_keyslot;

use super::errors::{error, from_fred};
use super::redirect::Redirect;
use super::{breaker_open, record, Inner, Links, RedisStore};
use crate::model::{Micros, MICROS_PER_MILLI};
use crate::store::{Deadline, ErrorKind, Reservations, StoreError};

/// Redirections followed per call.
const MAX_REDIRECTS: u32 = 3;

impl Reservations for RedisStore {
    async fn hold(
        &self,
        key: &[u8],
        record: Vec<u8>,
        expires_at: Micros,
        now: Micros,
        deadline: Deadline,
    ) -> Result<(), StoreError> {
        // Whole milliseconds, rounded up: a record never expires before its ttl.
        let ms = ((expires_at - now).max(1) + MICROS_PER_MILLI - 1) / MICROS_PER_MILLI;
        let args = vec![
            Value::Bytes(Bytes::copy_from_slice(key)),
            Value::Bytes(record.into()),
            Value::from("PX"),
            Value::Integer(ms),
        ];
        self.inner.command("SET", key, args, deadline).await?;
        Ok(())
    }

    async fn claim(
        &self,
        key: &[u8],
        _: Micros,
        deadline: Deadline,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let reply = self
            .inner
            .command(
                "GETDEL",
                key,
                vec![Value::Bytes(Bytes::copy_from_slice(key))],
                deadline,
            )
            .await?;
        match reply {
            Value::Null => Ok(None),
            Value::Bytes(b) => Ok(Some(b.to_vec())),
            Value::String(s) => Ok(Some(s.as_bytes().to_vec())),
            other => Err(error(
                ErrorKind::Script,
                format!("GETDEL answered {:?}", other.kind()),
            )),
        }
    }
}

impl Inner {
    /// One command on `key`, behind the breaker of the node it goes to.
    async fn command(
        &self,
        name: &'static str,
        key: &[u8],
        args: Vec<Value>,
        deadline: Deadline,
    ) -> Result<Value, StoreError> {
        let timeout = self.timeout(deadline);
        match &self.links {
            Links::Pool(pool) => {
                if !self.breaker.allows() {
                    return Err(breaker_open());
                }
                let result = send(pool.next_connected(), name, None, args, timeout)
                    .await
                    .map_err(|e| from_fred(&e));
                record(&self.breaker, &result);
                result
            }
            Links::Cluster(nodes) => {
                let slot = redis_keyslot(key);
                let mut attempt = 0;
                loop {
                    attempt += 1;
                    let node = nodes.route(slot).ok_or_else(|| {
                        error(
                            ErrorKind::Cluster,
                            format!("no known primary for slot {slot}"),
                        )
                    })?;
                    if !node.breaker.allows() {
                        return Err(breaker_open());
                    }
                    let client = node.pool.next_connected().clone();
                    let result = send(&client, name, Some(slot), args.clone(), timeout).await;
                    if let Err(e) = &result {
                        if let (true, Some(Redirect::Moved(addr))) =
                            (attempt < MAX_REDIRECTS, Redirect::of(e))
                        {
                            node.breaker.success();
                            nodes
                                .moved(slot, &addr)
                                .map_err(|e| error(ErrorKind::Cluster, e.to_string()))?;
                            continue;
                        }
                    }
                    let result = result.map_err(|e| from_fred(&e));
                    record(&node.breaker, &result);
                    return result;
                }
            }
        }
    }
}

async fn send(
    client: &Client,
    name: &'static str,
    slot: Option<u16>,
    args: Vec<Value>,
    timeout: Duration,
) -> Result<Value, fred::error::Error> {
    let hash = match slot {
        Some(s) => ClusterHash::Custom(s),
        None => ClusterHash::FirstKey,
    };
    let opts = Options {
        timeout: Some(timeout),
        fail_fast: true,
        ..Options::default()
    };
    client
        .with_options(&opts)
        .custom(CustomCommand::new_static(name, hash, false), args)
        .await
}
