//! Loading the function library ([`crate::store::redis::library`]) on a new connection,
//! before it serves: `FUNCTION LOAD` unless the server has it, and the older `sluice_*`
//! libraries deleted.

use super::{exchange, Dial, Stream};
use crate::store::redis::library::LIBRARY;
use crate::store::redis::link::resp::{self, Frame};

impl Dial {
    /// `FUNCTION LOAD` of the decision library ([`crate::store::redis::library`]) unless the server has it
    /// already: whether this connection decides with `FCALL`s. A server without functions
    /// (before Redis 7) or an ACL that refuses `FUNCTION LOAD` is no error: the connection
    /// decides with `EVALSHA`, as before. `Err`: the connection failed.
    pub(in crate::store::redis) async fn load_library(
        &self,
        s: &mut Stream,
    ) -> Result<bool, String> {
        let mut out = Vec::new();
        resp::encode_strs(&mut out, &[b"FUNCTION", b"LOAD", LIBRARY.source.as_bytes()]);
        let replies = tokio::time::timeout(self.timeout, exchange(s, &out, 1))
            .await
            .map_err(|_| format!("FUNCTION LOAD: no reply within {:?}", self.timeout))??;
        match &replies[0] {
            Frame::Error(e) if e.contains("already exists") => Ok(true),
            Frame::Error(e) => {
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    tracing::warn!(target: "sluice::store::redis", error = %e, "redis refused the function library: decisions go as one EVALSHA each (more Redis CPU per decision)");
                });
                Ok(false)
            }
            _ => {
                self.delete_other_libraries(s).await?;
                Ok(true)
            }
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
