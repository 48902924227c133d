//! RESP2, the Redis wire format, for the serving threads' own connections ([`super`]):
//! commands written into a byte buffer (many per write) and replies read back from one.
//! Pure: no I/O, so the framing is tested here byte for byte.

pub use super::value::{sha1_hex, Value};

/// One reply from the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// `+OK`
    Simple(Vec<u8>),
    /// `-ERR ...`: the server refused the command (its text, code first).
    Error(String),
    Integer(i64),
    /// `$n` (`None`: the null bulk string, `$-1`).
    Bulk(Option<Vec<u8>>),
    /// `*n` (`None`: the null array, `*-1`).
    Array(Option<Vec<Frame>>),
}

/// The stream carries something that is not RESP2: the connection cannot be trusted further.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed reply from redis: {0}")]
pub struct ProtocolError(pub &'static str);

/// A value a command argument cannot be (only strings, bytes and integers are sent).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot send a {0} as a redis command argument")]
pub struct ArgumentError(pub String);

/// Nested arrays deeper than this are refused: no reply of ours nests more than twice.
const MAX_DEPTH: usize = 8;

/// The longest bulk string or array accepted (Redis' own `proto-max-bulk-len` default).
const MAX_LEN: i64 = 512 * 1024 * 1024;

/// Appends `name args..` as one RESP command to `out`. On error `out` is left as it was.
pub fn encode(out: &mut Vec<u8>, name: &str, args: &[Value]) -> Result<(), ArgumentError> {
    let start = out.len();
    header(out, b'*', args.len() + 1);
    bulk(out, name.as_bytes());
    encode_args(out, args).inspect_err(|_| out.truncate(start))
}

/// Appends `args` as bulk strings, without a command's header (a caller that counts the
/// elements itself: the link's batches). On error `out` is left as it was.
pub fn encode_args(out: &mut Vec<u8>, args: &[Value]) -> Result<(), ArgumentError> {
    let start = out.len();
    for a in args {
        match a {
            Value::Bytes(b) => bulk(out, b),
            Value::String(s) => bulk(out, s.as_bytes()),
            Value::Integer(i) => bulk_int(out, *i),
            other => {
                out.truncate(start);
                return Err(ArgumentError(other.kind().to_string()));
            }
        }
    }
    Ok(())
}

/// Appends the header of a command of `n` elements (its arguments follow as bulk strings).
pub fn command_header(out: &mut Vec<u8>, n: usize) {
    header(out, b'*', n);
}

/// Appends an integer as a bulk string (how commands carry numbers), assembled on the stack
/// and copied once: each decision carries several.
pub fn bulk_int(out: &mut Vec<u8>, n: i64) {
    let mut d = [0; 20];
    let d = digits(n, &mut d);
    // `$`, the length (1 to 20: two digits at most), CRLF, the digits, CRLF.
    let mut buf = [0u8; 32];
    buf[0] = b'$';
    let mut i = 1;
    if d.len() >= 10 {
        buf[i] = b'0' + (d.len() / 10) as u8;
        i += 1;
    }
    buf[i] = b'0' + (d.len() % 10) as u8;
    buf[i + 1..i + 3].copy_from_slice(b"\r\n");
    i += 3;
    buf[i..i + d.len()].copy_from_slice(d);
    i += d.len();
    buf[i..i + 2].copy_from_slice(b"\r\n");
    out.extend_from_slice(&buf[..i + 2]);
}

/// Appends a command of string arguments (the connection's own: `AUTH`, `SELECT`, ...).
pub fn encode_strs(out: &mut Vec<u8>, args: &[&[u8]]) {
    header(out, b'*', args.len());
    for a in args {
        bulk(out, a);
    }
}

fn header(out: &mut Vec<u8>, kind: u8, n: usize) {
    out.push(kind);
    out.extend_from_slice(digits(n as i64, &mut [0; 20]));
    out.extend_from_slice(b"\r\n");
}

/// Appends one bulk string.
pub fn bulk(out: &mut Vec<u8>, b: &[u8]) {
    out.reserve(b.len() + 25);
    header(out, b'$', b.len());
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

/// An integer's decimal digits, written into `buf` without allocating (20 bytes hold
/// `i64::MIN`), two at a time: every decision carries several numbers (now, the limit, the
/// window), and this runs for each.
fn digits(n: i64, buf: &mut [u8; 20]) -> &[u8] {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";
    let mut i = buf.len();
    let mut v = n.unsigned_abs();
    while v >= 100 {
        let p = (v % 100) as usize * 2;
        v /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[p..p + 2]);
    }
    if v >= 10 {
        let p = v as usize * 2;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[p..p + 2]);
    } else {
        i -= 1;
        buf[i] = b'0' + v as u8;
    }
    if n < 0 {
        i -= 1;
        buf[i] = b'-';
    }
    &buf[i..]
}

/// Reads one reply from the front of `buf`: `Ok(Some((frame, bytes used)))`, `Ok(None)` when
/// `buf` holds only part of it (read more, then call again from the same start).
pub fn parse(buf: &[u8]) -> Result<Option<(Frame, usize)>, ProtocolError> {
    let mut at = 0;
    match frame(buf, &mut at, 0)? {
        Some(f) => Ok(Some((f, at))),
        None => Ok(None),
    }
}

fn frame(buf: &[u8], at: &mut usize, depth: usize) -> Result<Option<Frame>, ProtocolError> {
    // Integers, most of what a decision's reply holds, are read in one pass.
    if buf.get(*at) == Some(&b':') {
        return Ok(integer(buf, *at + 1)?.map(|(n, end)| {
            *at = end;
            Frame::Integer(n)
        }));
    }
    let Some(line) = line(buf, *at) else {
        return Ok(None);
    };
    let (kind, text) = match line.split_first() {
        Some((k, t)) => (*k, t),
        None => return Err(ProtocolError("empty line")),
    };
    let after_line = *at + line.len() + 2;
    let frame = match kind {
        b'+' => Frame::Simple(text.to_vec()),
        b'-' => Frame::Error(String::from_utf8_lossy(text).into_owned()),
        b':' => Frame::Integer(number(text)?),
        b'$' => {
            let n = number(text)?;
            if n < 0 {
                *at = after_line;
                return Ok(Some(Frame::Bulk(None)));
            }
            if n > MAX_LEN {
                return Err(ProtocolError("bulk string too long"));
            }
            let end = after_line + n as usize;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err(ProtocolError("bulk string not terminated"));
            }
            *at = end + 2;
            return Ok(Some(Frame::Bulk(Some(buf[after_line..end].to_vec()))));
        }
        b'*' => {
            let n = number(text)?;
            if n < 0 {
                *at = after_line;
                return Ok(Some(Frame::Array(None)));
            }
            if n > MAX_LEN || depth >= MAX_DEPTH {
                return Err(ProtocolError("array too long or too deep"));
            }
            let mut pos = after_line;
            // Capacity bounded by what the buffer can hold, not by the untrusted count.
            let mut items = Vec::with_capacity((n as usize).min(buf.len() / 3 + 1));
            for _ in 0..n {
                match frame(buf, &mut pos, depth + 1)? {
                    Some(f) => items.push(f),
                    None => return Ok(None),
                }
            }
            *at = pos;
            return Ok(Some(Frame::Array(Some(items))));
        }
        _ => return Err(ProtocolError("unknown reply type")),
    };
    *at = after_line;
    Ok(Some(frame))
}

/// The integer whose digits start at `at`, up to its `\r\n`, and where the next reply starts;
/// `None` until the `\r\n` has arrived.
fn integer(buf: &[u8], at: usize) -> Result<Option<(i64, usize)>, ProtocolError> {
    let rest = buf.get(at..).unwrap_or_default();
    let (v, i) = leading_number(rest)?;
    match (rest.get(i), rest.get(i + 1)) {
        (None, _) | (Some(b'\r'), None) => Ok(None),
        (Some(b'\r'), Some(b'\n')) => Ok(Some((v?, at + i + 2))),
        _ => Err(NAN),
    }
}

const NAN: ProtocolError = ProtocolError("not a number");

/// A decimal integer at the start of `text`, as Redis writes lengths and integer replies (an
/// optional `-`, then digits), and how many bytes it takes; the value is `Err` when there are
/// no digits. A value past `i64` is an error at once.
fn leading_number(text: &[u8]) -> Result<(Result<i64, ProtocolError>, usize), ProtocolError> {
    let start = usize::from(text.first() == Some(&b'-'));
    // Accumulated negative, so that i64::MIN reads too.
    let mut v: i64 = 0;
    let mut i = start;
    while let Some(&d) = text.get(i).filter(|d| d.is_ascii_digit()) {
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_sub(i64::from(d - b'0')))
            .ok_or(NAN)?;
        i += 1;
    }
    let v = if i == start {
        Err(NAN)
    } else if start == 1 {
        Ok(v)
    } else {
        v.checked_neg().ok_or(NAN)
    };
    Ok((v, i))
}

/// The line starting at `at`, without its `\r\n`; `None` until the `\r\n` has arrived.
fn line(buf: &[u8], at: usize) -> Option<&[u8]> {
    let rest = buf.get(at..)?;
    let mut from = 0;
    loop {
        let cr = from + memchr::memchr(b'\r', &rest[from..])?;
        if *rest.get(cr + 1)? == b'\n' {
            return Some(&rest[..cr]);
        }
        from = cr + 1;
    }
}

/// A decimal integer, as Redis writes lengths and integer replies: an optional `-`, then
/// digits; anything else (or a value past `i64`) is not a number.
fn number(text: &[u8]) -> Result<i64, ProtocolError> {
    match leading_number(text)? {
        (v, used) if used == text.len() => v,
        _ => Err(NAN),
    }
}

/// A script's flat integer reply (what [`crate::store::redis::script::decode`] reads).
pub fn integers(frame: Frame) -> Result<Vec<i64>, String> {
    match frame {
        Frame::Array(Some(items)) => items
            .into_iter()
            .map(|f| match f {
                Frame::Integer(i) => Ok(i),
                other => Err(format!("expected an integer, got {other:?}")),
            })
            .collect(),
        other => Err(format!("expected an array of integers, got {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn commands_are_framed_as_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        let args = [
            Value::from("abc"),
            Value::Integer(-42),
            Value::Integer(0),
            Value::Bytes(Bytes::from_static(b"")),
            Value::Integer(i64::MIN),
        ];
        encode(&mut out, "FCALL", &args).unwrap();
        assert_eq!(
            out,
            b"*6\r\n$5\r\nFCALL\r\n$3\r\nabc\r\n$3\r\n-42\r\n$1\r\n0\r\n$0\r\n\r\n$20\r\n-9223372036854775808\r\n"
        );
        // A second command goes after the first: one buffer, one write.
        encode_strs(&mut out, &[b"PING"]);
        assert!(out.ends_with(b"*1\r\n$4\r\nPING\r\n"));
        let len = out.len();
        assert!(encode(&mut out, "X", &[Value::from("a"), Value::Null]).is_err());
        assert_eq!(out.len(), len, "a refused command leaves nothing behind");
    }

    #[test]
    fn replies_are_read_whole_or_not_at_all() {
        let wire: &[u8] =
            b"*3\r\n:1\r\n$2\r\nab\r\n*-1\r\n+OK\r\n-NOSCRIPT No matching script\r\n$-1\r\n";
        let (f, n) = parse(wire).unwrap().unwrap();
        assert_eq!(
            f,
            Frame::Array(Some(vec![
                Frame::Integer(1),
                Frame::Bulk(Some(b"ab".to_vec())),
                Frame::Array(None)
            ]))
        );
        let (f, m) = parse(&wire[n..]).unwrap().unwrap();
        assert_eq!(f, Frame::Simple(b"OK".to_vec()));
        let (f, k) = parse(&wire[n + m..]).unwrap().unwrap();
        assert_eq!(f, Frame::Error("NOSCRIPT No matching script".into()));
        assert_eq!(
            parse(&wire[n + m + k..]).unwrap().unwrap().0,
            Frame::Bulk(None)
        );
        // Every strict prefix of a reply is incomplete, never an error or a wrong frame.
        for cut in 0..n {
            assert_eq!(parse(&wire[..cut]), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn garbage_is_a_protocol_error() {
        for bad in [
            &b"?x\r\n"[..],
            b":12a\r\n",
            b"$2\r\nabcd\r\n",
            b"\r\n",
            b"$999999999999\r\n",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        let deep = "*1\r\n".repeat(MAX_DEPTH + 1) + ":1\r\n";
        assert!(parse(deep.as_bytes()).is_err());
    }

    #[test]
    fn numbers_are_written_and_read_as_rust_does() {
        let mut samples = vec![0, 1, 9, 10, 99, 100, 101, 999, 1000, i64::MAX, i64::MIN, -1];
        let mut x: i64 = 1;
        while let Some(y) = x.checked_mul(7) {
            samples.extend([y, -y, y - 1, 1 - y]);
            x = y;
        }
        for n in samples {
            let text = n.to_string();
            assert_eq!(digits(n, &mut [0; 20]), text.as_bytes());
            assert_eq!(number(text.as_bytes()), Ok(n));
            let reply = format!(":{text}\r\n");
            assert_eq!(
                parse(reply.as_bytes()),
                Ok(Some((Frame::Integer(n), reply.len())))
            );
            let (mut a, mut b) = (Vec::new(), Vec::new());
            bulk_int(&mut a, n);
            bulk(&mut b, text.as_bytes());
            assert_eq!(a, b);
        }
        for bad in [
            "",
            "-",
            "1-",
            "9223372036854775808",
            "-9223372036854775809",
            " 1",
            "+1",
        ] {
            assert!(number(bad.as_bytes()).is_err(), "{bad:?}");
            assert!(parse(format!(":{bad}\r\n").as_bytes()).is_err(), "{bad:?}");
        }
        assert!(parse(b":12\rx").is_err());
        // A lone CR is part of a line; only CR LF ends it.
        assert_eq!(line(b"+a\rb\r\n", 0), Some(&b"+a\rb"[..]));
        assert_eq!(line(b"+ab\r", 0), None);
    }

    #[test]
    fn integer_replies_become_a_vector() {
        let f = Frame::Array(Some(vec![Frame::Integer(5), Frame::Integer(-1)]));
        assert_eq!(integers(f), Ok(vec![5, -1]));
        assert!(integers(Frame::Integer(1)).is_err());
        assert!(integers(Frame::Array(Some(vec![Frame::Bulk(None)]))).is_err());
    }

    #[test]
    fn binary_arguments_and_replies_pass_untouched() {
        // A bulk string's length frames it: CR LF and NUL inside are data.
        let mut out = Vec::new();
        encode(
            &mut out,
            "SET",
            &[
                Value::from("k"),
                Value::Bytes(Bytes::from_static(b"a\r\n\0b")),
            ],
        )
        .unwrap();
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\na\r\n\0b\r\n");
        let wire = b"$5\r\na\r\n\0b\r\n";
        assert_eq!(
            parse(wire),
            Ok(Some((Frame::Bulk(Some(b"a\r\n\0b".to_vec())), wire.len())))
        );
        // Empty arrays and strings, and an error reply whose text holds a colon.
        assert_eq!(parse(b"*0\r\n"), Ok(Some((Frame::Array(Some(vec![])), 4))));
        assert_eq!(
            parse(b"$0\r\n\r\n"),
            Ok(Some((Frame::Bulk(Some(vec![])), 6)))
        );
        assert_eq!(
            parse(b"-MOVED 3999 127.0.0.1:6381\r\n").unwrap().unwrap().0,
            Frame::Error("MOVED 3999 127.0.0.1:6381".into())
        );
        // A negative length other than -1 is still the null reply (as Redis reads it).
        assert_eq!(parse(b"*-1\r\n").unwrap().unwrap().0, Frame::Array(None));
    }
}
