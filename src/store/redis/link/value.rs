//! A command argument ([`Value`]): what the link encodes as a RESP bulk string. Replies are
//! read as [`super::resp::Frame`]s; a `Value` is only ever written.

use bytes::Bytes;

/// One argument of a command (the shape scripts' argument lists are built from).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// No value: never sent (an argument that is `Null` is refused when encoded).
    Null,
    Integer(i64),
    String(String),
    Bytes(Bytes),
}

impl Value {
    /// What kind of value this is (for error messages).
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Integer(_) => "integer",
            Value::String(_) => "string",
            Value::Bytes(_) => "bytes",
        }
    }

    /// The integer, or a string or bytes holding one in decimal.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Integer(i) => Some(*i),
            Value::String(s) => s.parse().ok(),
            Value::Bytes(b) => std::str::from_utf8(b).ok()?.parse().ok(),
            Value::Null => None,
        }
    }

    /// The bytes a string or bytes value sends.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::String(s) => Some(s.as_bytes()),
            Value::Bytes(b) => Some(b),
            Value::Integer(_) | Value::Null => None,
        }
    }

    /// The text of a string, bytes (lossy) or integer value.
    pub fn as_str(&self) -> Option<std::borrow::Cow<'_, str>> {
        match self {
            Value::String(s) => Some(s.as_str().into()),
            Value::Bytes(b) => Some(String::from_utf8_lossy(b)),
            Value::Integer(i) => Some(i.to_string().into()),
            Value::Null => None,
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::String(s.to_string())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::String(s)
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Value {
        Value::Integer(i)
    }
}

impl From<Bytes> for Value {
    fn from(b: Bytes) -> Value {
        Value::Bytes(b)
    }
}

impl From<Vec<u8>> for Value {
    fn from(b: Vec<u8>) -> Value {
        Value::Bytes(b.into())
    }
}

/// The lowercase hex SHA-1 of `text`: what names the function library after its source
/// ([`crate::store::redis::library`]; ring's, the crypto crate already in the graph).
pub fn sha1_hex(text: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, text.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_as_fred_read_them() {
        assert_eq!(Value::from("12").as_i64(), Some(12));
        assert_eq!(Value::Bytes(Bytes::from_static(b"-3")).as_i64(), Some(-3));
        assert_eq!(Value::from("x").as_i64(), None);
        assert_eq!(Value::Null.as_i64(), None);
        assert_eq!(Value::Integer(7).as_bytes(), None);
        assert_eq!(Value::from("ab").as_bytes(), Some(&b"ab"[..]));
        assert_eq!(Value::Integer(-7).as_str().as_deref(), Some("-7"));
        assert_eq!(Value::Null.kind(), "null");
        // The SHA-1 Redis names `return 1` by.
        assert_eq!(
            sha1_hex("return 1"),
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
        );
        assert_eq!(sha1_hex(""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    }
}
