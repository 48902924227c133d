//! Loading the function library ([`crate::store::redis::library`]) on a new connection,
//! before it serves: `FUNCTION LOAD` unless the server has it, and the older `sluice_*`
//! libraries deleted.

use super::{exchange, Dial, Stream};
use crate::store::redis::library::LIBRARY;
use crate::store::redis::link::resp::{self, Frame};

/// Why a connection could not load the library.
#[derive(Debug)]
pub(in crate::store::redis) enum LoadError {
    /// The server refused `FUNCTION LOAD` (its error reply): no Functions (before Redis 7.0
    /// or Valkey 7.2), or an ACL without `FUNCTION`. The connection cannot serve.
    Refused(String),
    /// The connection failed meanwhile.
    Failed(String),
}

impl Dial {
    /// `FUNCTION LOAD` of the decision library ([`crate::store::redis::library`]) unless the
    /// server has it already. Every decision is an `FCALL` of it, so a connection that cannot
    /// load it does not serve: [`LoadError::Refused`] when the server refuses (before Redis 7,
    /// or an ACL without `FUNCTION`), [`LoadError::Failed`] when the connection failed.
    pub(in crate::store::redis) async fn load_library(
        &self,
        s: &mut Stream,
    ) -> Result<(), LoadError> {
        let mut out = Vec::new();
        resp::encode_strs(&mut out, &[b"FUNCTION", b"LOAD", LIBRARY.source.as_bytes()]);
        let replies = tokio::time::timeout(self.timeout, exchange(s, &out, 1))
            .await
            .map_err(|_| format!("FUNCTION LOAD: no reply within {:?}", self.timeout))
            .and_then(|r| r)
            .map_err(LoadError::Failed)?;
        match &replies[0] {
            Frame::Error(e) if e.contains("already exists") => Ok(()),
            Frame::Error(e) => Err(LoadError::Refused(e.clone())),
            _ => self
                .delete_other_libraries(s)
                .await
                .map_err(LoadError::Failed),
        }
    }

    /// Deletes every `sluice_*` function library but this build's. A refusal (an ACL without
    /// `FUNCTION DELETE`) leaves them, as before; a reply that does not come fails the
    /// connection, since a late one would be read as the reply to its first decision.
    async fn delete_other_libraries(&self, s: &mut Stream) -> Result<(), String> {
        let mut out = Vec::new();
        resp::encode_strs(
            &mut out,
            &[b"FUNCTION", b"LIST", b"LIBRARYNAME", b"sluice_*"],
        );
        let replies = tokio::time::timeout(self.timeout, exchange(s, &out, 1))
            .await
            .map_err(|_| format!("FUNCTION LIST: no reply within {:?}", self.timeout))??;
        let others: Vec<Vec<u8>> = library_names(&replies[0])
            .into_iter()
            .filter(|n| n.starts_with(b"sluice_") && n != LIBRARY.name.as_bytes())
            .collect();
        if others.is_empty() {
            return Ok(());
        }
        let mut out = Vec::new();
        for name in &others {
            resp::encode_strs(&mut out, &[b"FUNCTION", b"DELETE", name]);
        }
        tokio::time::timeout(self.timeout, exchange(s, &out, others.len()))
            .await
            .map_err(|_| format!("FUNCTION DELETE: no reply within {:?}", self.timeout))??;
        Ok(())
    }
}

/// The library names in a `FUNCTION LIST` reply (each library a flat array of name/value
/// pairs in RESP2).
fn library_names(reply: &Frame) -> Vec<Vec<u8>> {
    let Frame::Array(Some(libraries)) = reply else {
        return Vec::new();
    };
    libraries
        .iter()
        .filter_map(|lib| {
            let Frame::Array(Some(fields)) = lib else {
                return None;
            };
            fields.chunks_exact(2).find_map(|kv| match kv {
                [Frame::Bulk(Some(k)), Frame::Bulk(Some(v))] if k == b"library_name" => {
                    Some(v.clone())
                }
                _ => None,
            })
        })
        .collect()
}
