//! What a Redis failure is: the link's errors ([`CallError`], the one taxonomy of sluice's
//! Redis client) classified into the store's [`ErrorKind`]s, here and nowhere else: the
//! metrics label and what the breaker counts (outages, never script errors).

use super::link::CallError;
use super::BACKEND;
use crate::store::{ErrorKind, StoreError};

pub(super) fn breaker_open() -> StoreError {
    error(
        ErrorKind::BreakerOpen,
        "circuit breaker open (redis failing)",
    )
}

pub(super) fn error(kind: ErrorKind, message: impl Into<String>) -> StoreError {
    StoreError::new(BACKEND, kind, message)
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

/// An error reply read by a link.
pub(super) fn from_reply(details: &str) -> StoreError {
    error(reply_kind(details), details)
}

/// A call on a link that failed: the one place a [`CallError`] becomes a [`StoreError`].
pub(super) fn from_call(e: CallError) -> StoreError {
    match e {
        CallError::Timeout => error(ErrorKind::Timeout, "redis call timed out"),
        CallError::NotSent => error(ErrorKind::Connection, "not connected"),
        CallError::Lost(why, _) => error(ErrorKind::Connection, format!("connection lost: {why}")),
        CallError::Argument(e) => error(ErrorKind::Script, e.to_string()),
        CallError::Reply(e) => from_reply(&e),
        CallError::Unexpected(e) => error(ErrorKind::Script, format!("unexpected reply: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_side_failures_are_outages_and_error_replies_are_not() {
        let kind = |e: CallError| from_call(e).kind();
        let reply = |d: &str| kind(CallError::Reply(d.to_string()));
        assert_eq!(kind(CallError::NotSent), ErrorKind::Connection);
        assert_eq!(
            kind(CallError::Lost("closed".into(), 1)),
            ErrorKind::Connection
        );
        assert_eq!(kind(CallError::Timeout), ErrorKind::Timeout);
        assert_eq!(reply("MOVED 12 127.0.0.1:7001"), ErrorKind::Cluster);
        assert_eq!(reply("ASK 12 127.0.0.1:7001"), ErrorKind::Cluster);
        assert_eq!(reply("CLUSTERDOWN The cluster is down"), ErrorKind::Cluster);
        assert_eq!(reply("TRYAGAIN Multiple keys"), ErrorKind::Server);
        assert_eq!(reply("BUSY Redis is busy"), ErrorKind::Server);
        assert_eq!(reply("OOM command not allowed"), ErrorKind::Server);
        assert_eq!(reply("READONLY You can't write"), ErrorKind::Server);
        assert_eq!(reply("LOADING Redis is loading"), ErrorKind::Server);
        // Refused credentials fail the link's set-up (not connected); on a command, an ACL's
        // refusal is an answer, as before.
        assert_eq!(
            reply("NOPERM this user has no permissions"),
            ErrorKind::Script
        );
        assert_eq!(
            reply("ERR Error running script (call to f_x): bad"),
            ErrorKind::Script
        );
        assert_eq!(reply("NOSCRIPT No matching script"), ErrorKind::Script);
        assert_eq!(reply("connection reset"), ErrorKind::Connection);
        assert_eq!(kind(CallError::Unexpected("x".into())), ErrorKind::Script);
        for outage in [
            kind(CallError::NotSent),
            kind(CallError::Timeout),
            reply("LOADING x"),
        ] {
            assert!(outage.is_outage(), "{outage:?}");
        }
        assert!(!reply("NOSCRIPT x").is_outage());
    }
}
