//! What a Redis failure is: fred's errors and our own connections' ([`super::link`])
//! classified into the store's [`ErrorKind`]s, the metrics label and what the breaker counts
//! (outages, never script errors).

use super::link::CallError;
use super::BACKEND;
use crate::store::{ErrorKind, StoreError};

pub(super) fn error(kind: ErrorKind, message: impl Into<String>) -> StoreError {
    StoreError::new(BACKEND, kind, message)
}

pub(super) fn from_fred(e: &fred::error::Error) -> StoreError {
    error(kind_of(e), format!("{:?}: {}", e.kind(), e.details()))
}

/// Classifies a fred error: its kind for client-side failures; for an error reply, the
/// reply's first word. fred reports some client-side failures as `Unknown` too ("Too many
/// failed write attempts.", a dropped reply channel's "channel closed", "Failed to route
/// command."): those are outages, not script errors, or the breaker would count a lost
/// connection as an answer.
pub(super) fn kind_of(e: &fred::error::Error) -> ErrorKind {
    use fred::error::ErrorKind as F;
    match e.kind() {
        F::Timeout => ErrorKind::Timeout,
        F::Cluster | F::Routing => ErrorKind::Cluster,
        F::Backpressure => ErrorKind::Server,
        F::Parse | F::Protocol | F::InvalidArgument | F::InvalidCommand | F::NotFound => {
            ErrorKind::Script
        }
        F::Unknown => reply_kind(e.details()),
        // IO, TLS, auth, configuration, sentinel, cancelled by a closing connection.
        _ => ErrorKind::Connection,
    }
}

/// Classifies an error reply by its code (its first word); text that is no reply code is
/// a client-side failure, an outage.
pub(super) fn reply_kind(details: &str) -> ErrorKind {
    match details.split_whitespace().next().unwrap_or("") {
        "BUSY" | "LOADING" | "OOM" | "READONLY" | "MASTERDOWN" | "TRYAGAIN" | "NOREPLICAS" => {
            ErrorKind::Server
        }
        "CLUSTERDOWN" | "MOVED" | "ASK" | "CROSSSLOT" => ErrorKind::Cluster,
        // An error reply's code is one upper-case word (ERR, NOSCRIPT, WRONGTYPE...).
        w if !w.is_empty() && w.bytes().all(|b| b.is_ascii_uppercase()) => ErrorKind::Script,
        _ => ErrorKind::Connection,
    }
}

/// An error reply read by a thread's own connection ([`super::link`]).
pub(super) fn from_reply(details: &str) -> StoreError {
    error(reply_kind(details), details)
}

/// A call on a thread's own connection that got no reply.
pub(super) fn from_call(e: CallError) -> StoreError {
    match e {
        CallError::Timeout => error(ErrorKind::Timeout, "redis call timed out"),
        CallError::NotSent => error(ErrorKind::Connection, "not connected"),
        CallError::Lost(why, _) => error(ErrorKind::Connection, format!("connection lost: {why}")),
        CallError::Argument(e) => error(ErrorKind::Script, e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fred::error::{Error, ErrorKind as F};

    #[test]
    fn client_side_failures_are_outages_and_error_replies_are_not() {
        let kind = |k: F, details: &str| kind_of(&Error::new(k, details.to_string()));
        for lost in [
            "Too many failed write attempts.",
            "channel closed",
            "Failed to route command.",
        ] {
            assert_eq!(kind(F::Unknown, lost), ErrorKind::Connection, "{lost}");
        }
        assert_eq!(
            kind(F::Canceled, "Connection closed unexpectedly."),
            ErrorKind::Connection
        );
        assert_eq!(kind(F::Timeout, "Request timed out."), ErrorKind::Timeout);
        assert_eq!(
            kind(F::Cluster, "MOVED 12 127.0.0.1:7001"),
            ErrorKind::Cluster
        );
        assert_eq!(
            kind(F::Unknown, "CLUSTERDOWN The cluster is down"),
            ErrorKind::Cluster
        );
        assert_eq!(
            kind(F::Unknown, "TRYAGAIN Multiple keys"),
            ErrorKind::Server
        );
        assert_eq!(kind(F::Unknown, "BUSY Redis is busy"), ErrorKind::Server);
        assert_eq!(
            kind(F::Unknown, "ERR Error running script (call to f_x): bad"),
            ErrorKind::Script
        );
        assert_eq!(
            kind(F::Unknown, "NOSCRIPT No matching script"),
            ErrorKind::Script
        );
    }
}
