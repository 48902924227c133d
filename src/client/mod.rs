//! A Rust client of the native API (`sluice.v1.RateLimiter`), for services that call sluice
//! themselves. [`Client::check`] decides (and charges) a request; [`Client::reserve`] holds an
//! estimate and returns a [`Reservation`], a guard that settles it: [`Reservation::commit`]
//! with the hits actually used, [`Reservation::cancel`], or, if dropped unsettled, a cancel
//! sent in the background (so an error or a panic between reserve and commit gives the quota
//! back instead of holding it until the reservation's ttl).
//!
//! ```no_run
//! # async fn f() -> Result<(), sluice::client::ClientError> {
//! use std::time::Duration;
//! use sluice::client::{Client, Descriptor, Reserved};
//!
//! let mut sluice = Client::connect("http://127.0.0.1:8081").await?;
//! let tenant = Descriptor::new([("tenant", "acme")]).hits(2_000); // estimated tokens
//! match sluice.reserve("llm", [tenant], Duration::from_secs(60)).await? {
//!     Reserved::Granted(reservation) => {
//!         let used = 1_234; // ... call the model, count the tokens ...
//!         reservation.commit(used).await?;
//!     }
//!     Reserved::Rejected(answer) => println!("over the limit: {:?}", answer.statuses),
//! }
//! # Ok(()) }
//! ```

use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

use crate::proto::sluice::v1 as pb;
use crate::proto::sluice::v1::rate_limiter_client::RateLimiterClient;

pub use pb::{CheckResponse, DescriptorStatus, ReserveResponse};

/// What a call to sluice can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to sluice: {0}")]
    Connect(#[from] tonic::transport::Error),
    /// sluice answered with an error status (see README.md, "Direct clients (sluice.v1)").
    #[error("sluice answered {}: {}", .0.code(), .0.message())]
    Status(#[from] tonic::Status),
}

/// One descriptor: entries matched in order against the domain's rules, and its hits.
#[derive(Clone, Debug, PartialEq)]
pub struct Descriptor(pb::Descriptor);

impl Descriptor {
    pub fn new<K: Into<String>, V: Into<String>>(
        entries: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Descriptor(pb::Descriptor {
            entries: entries
                .into_iter()
                .map(|(key, value)| pb::Entry {
                    key: key.into(),
                    value: value.into(),
                })
                .collect(),
            hits: None,
        })
    }

    /// Hits this descriptor counts for (1 when not set; for a reservation, the estimate).
    pub fn hits(mut self, hits: u64) -> Self {
        self.0.hits = Some(hits);
        self
    }
}

fn descriptors(d: impl IntoIterator<Item = Descriptor>) -> Vec<pb::Descriptor> {
    d.into_iter().map(|d| d.0).collect()
}

/// A connection to sluice's gRPC port (cheap to clone: clones share the connection).
#[derive(Clone, Debug)]
pub struct Client {
    inner: RateLimiterClient<Channel>,
}

/// The answer to [`Client::reserve`].
#[derive(Debug)]
pub enum Reserved {
    /// Admitted: the estimate is charged and held until the guard settles it.
    Granted(Reservation),
    /// Over a limit: nothing is held.
    Rejected(ReserveResponse),
}

impl Client {
    /// Connects to `addr` (`http://host:port`).
    pub async fn connect(addr: impl Into<String>) -> Result<Client, ClientError> {
        let channel = Endpoint::from_shared(addr.into())?.connect().await?;
        Ok(Client::new(channel))
    }

    pub fn new(channel: Channel) -> Client {
        Client {
            inner: RateLimiterClient::new(channel),
        }
    }

    /// Decides `descriptors` in `domain`, charging them when allowed.
    pub async fn check(
        &mut self,
        domain: &str,
        descriptors: impl IntoIterator<Item = Descriptor>,
    ) -> Result<CheckResponse, ClientError> {
        self.ask(domain, descriptors, false).await
    }

    /// Decides `descriptors` without charging anything.
    pub async fn dry_run(
        &mut self,
        domain: &str,
        descriptors: impl IntoIterator<Item = Descriptor>,
    ) -> Result<CheckResponse, ClientError> {
        self.ask(domain, descriptors, true).await
    }

    async fn ask(
        &mut self,
        domain: &str,
        d: impl IntoIterator<Item = Descriptor>,
        dry_run: bool,
    ) -> Result<CheckResponse, ClientError> {
        let request = pb::CheckRequest {
            domain: domain.into(),
            descriptors: descriptors(d),
            dry_run,
        };
        Ok(self.inner.check(request).await?.into_inner())
    }

    /// Charges the descriptors' hits (the estimate) and holds them for at most `ttl`; a
    /// reservation never settled counts as used when `ttl` ends.
    pub async fn reserve(
        &mut self,
        domain: &str,
        d: impl IntoIterator<Item = Descriptor>,
        ttl: Duration,
    ) -> Result<Reserved, ClientError> {
        let request = pb::ReserveRequest {
            domain: domain.into(),
            descriptors: descriptors(d),
            ttl: Some(prost_types::Duration {
                seconds: i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX),
                nanos: ttl.subsec_nanos() as i32,
            }),
        };
        let answer = self.inner.reserve(request).await?.into_inner();
        if !answer.allowed {
            return Ok(Reserved::Rejected(answer));
        }
        Ok(Reserved::Granted(Reservation {
            client: self.inner.clone(),
            id: answer.reservation_id.clone(),
            answer,
            settled: false,
        }))
    }
}

/// A held reservation: commit it, cancel it, or drop it (a cancel is then sent in the
/// background on the current Tokio runtime; with none, it expires after its ttl as used).
#[derive(Debug)]
pub struct Reservation {
    client: RateLimiterClient<Channel>,
    id: String,
    answer: ReserveResponse,
    settled: bool,
}

impl Reservation {
    pub fn id(&self) -> &str {
        &self.id
    }

    /// sluice's answer to the Reserve (statuses, IETF headers).
    pub fn answer(&self) -> &ReserveResponse {
        &self.answer
    }

    /// Settles at `actual_hits` per descriptor: what was reserved but not used is given back,
    /// an overrun is charged (sluice never refuses a commit for being over a limit).
    pub async fn commit(mut self, actual_hits: u64) -> Result<(), ClientError> {
        self.settled = true;
        let request = pb::CommitRequest {
            reservation_id: self.id.clone(),
            actual_hits,
        };
        self.client.commit(request).await?;
        Ok(())
    }

    /// Gives everything back.
    pub async fn cancel(mut self) -> Result<(), ClientError> {
        self.settled = true;
        cancel(self.client.clone(), self.id.clone()).await
    }
}

async fn cancel(mut client: RateLimiterClient<Channel>, id: String) -> Result<(), ClientError> {
    client
        .cancel(pb::CancelRequest { reservation_id: id })
        .await?;
    Ok(())
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (client, id) = (self.client.clone(), std::mem::take(&mut self.id));
            runtime.spawn(async move {
                if let Err(e) = cancel(client, id).await {
                    tracing::debug!(error = %e, "cancelling a dropped reservation failed");
                }
            });
        }
    }
}
