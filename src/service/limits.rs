//! Size limits of a `ShouldRateLimit` request, checked on the decoded protobuf before any other
//! work (matching, key building, the store). The encoded size is bounded earlier still, by
//! tonic's decode limit (`max_request_bytes`), whose error [`overload`](super::overload)
//! turns into INVALID_ARGUMENT.
//!
//! Values are never interpreted here: keys and values are bytes (any byte, any encoding); only
//! their lengths and counts are limited.

use crate::proto::RateLimitRequest;

/// Every limit, with the defaults of `sluice serve` (SECURITY.md explains each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestLimits {
    /// Largest encoded request (tonic's decode limit).
    pub max_request_bytes: usize,
    pub max_descriptors: usize,
    pub max_entries: usize,
    pub max_key_bytes: usize,
    pub max_value_bytes: usize,
    pub max_domain_bytes: usize,
}

impl Default for RequestLimits {
    fn default() -> Self {
        RequestLimits {
            max_request_bytes: 262_144,
            max_descriptors: 64,
            max_entries: 32,
            max_key_bytes: 256,
            max_value_bytes: 65_536,
            max_domain_bytes: 256,
        }
    }
}

impl RequestLimits {
    /// The first limit `req` breaks, as the INVALID_ARGUMENT message (naming the setting).
    #[inline(never)] // a stage the profile counts (bench/profile_memory.py)
    pub fn check(&self, req: &RateLimitRequest) -> Result<(), String> {
        if req.domain.len() > self.max_domain_bytes {
            return Err(format!(
                "domain is {} bytes, more than the limit of {} (--max-domain-bytes)",
                req.domain.len(),
                self.max_domain_bytes
            ));
        }
        if req.descriptors.len() > self.max_descriptors {
            return Err(format!(
                "request has {} descriptors, more than the limit of {} (--max-descriptors)",
                req.descriptors.len(),
                self.max_descriptors
            ));
        }
        for (i, d) in req.descriptors.iter().enumerate() {
            if d.entries.len() > self.max_entries {
                return Err(format!(
                    "descriptor {i} has {} entries, more than the limit of {} (--max-entries)",
                    d.entries.len(),
                    self.max_entries
                ));
            }
            for (j, e) in d.entries.iter().enumerate() {
                if e.key.len() > self.max_key_bytes {
                    return Err(format!(
                        "descriptor {i} entry {j}: key is {} bytes, more than the limit of {} (--max-key-bytes)",
                        e.key.len(),
                        self.max_key_bytes
                    ));
                }
                if e.value.len() > self.max_value_bytes {
                    return Err(format!(
                        "descriptor {i} entry {j}: value is {} bytes, more than the limit of {} (--max-value-bytes)",
                        e.value.len(),
                        self.max_value_bytes
                    ));
                }
            }
        }
        Ok(())
    }
}

/// tonic's message for a request above its decode limit, as an INVALID_ARGUMENT message
/// naming the setting; `None` for any other message.
pub(crate) fn decode_limit_message(tonic_message: &str) -> Option<String> {
    // "Error, decoded message length too large: found {len} bytes, the limit is: {limit} bytes"
    let rest = tonic_message.strip_prefix("Error, decoded message length too large: found ")?;
    let (len, rest) = rest.split_once(" bytes, the limit is: ")?;
    let limit = rest.strip_suffix(" bytes")?;
    Some(format!(
        "request is {len} bytes, more than the limit of {limit} (--max-request-bytes)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::rate_limit_descriptor::Entry;
    use crate::proto::RateLimitDescriptor;

    fn request(entries: usize, key: usize, value: usize) -> RateLimitRequest {
        RateLimitRequest {
            domain: "d".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: (0..entries)
                    .map(|_| Entry {
                        key: vec![b'k'; key],
                        value: vec![0xff; value],
                    })
                    .collect(),
                ..Default::default()
            }],
            hits_addend: 0,
        }
    }

    #[test]
    fn each_limit_is_named() {
        let l = RequestLimits::default();
        assert_eq!(l.check(&request(32, 256, 65_536)), Ok(()));
        let e = l.check(&request(33, 1, 1)).unwrap_err();
        assert!(e.contains("--max-entries"), "{e}");
        let e = l.check(&request(1, 257, 1)).unwrap_err();
        assert!(e.contains("--max-key-bytes"), "{e}");
        let e = l.check(&request(1, 1, 65_537)).unwrap_err();
        assert!(e.contains("--max-value-bytes"), "{e}");
        let mut r = request(1, 1, 1);
        r.domain = "x".repeat(257);
        assert!(l.check(&r).unwrap_err().contains("--max-domain-bytes"));
        let mut r = request(1, 1, 1);
        r.descriptors = vec![Default::default(); 65];
        assert!(l.check(&r).unwrap_err().contains("--max-descriptors"));
    }

    #[test]
    fn tonic_decode_message_is_rewritten() {
        assert_eq!(
            decode_limit_message(
                "Error, decoded message length too large: found 300 bytes, the limit is: 200 bytes"
            )
            .as_deref(),
            Some("request is 300 bytes, more than the limit of 200 (--max-request-bytes)")
        );
        assert_eq!(decode_limit_message("something else"), None);
    }
}
