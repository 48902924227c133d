//! Bounded excerpts of text that came from outside (a client's ids, names and values, a config
//! file's keys) for error messages: an error never echoes unbounded input, so a 100 KB id cannot
//! make a 100 KB `grpc-message` (which gRPC clients refuse as RESOURCE_EXHAUSTED) or log line.

use std::borrow::Cow;

/// The most bytes of an input an error message quotes.
pub const MAX_EXCERPT_BYTES: usize = 128;
/// The most bytes of a whole error message sent to a client: room for a few excerpts and the
/// sentence around them, so only a message that quotes its input whole is ever cut to it.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// `s` itself when short; else its first [`MAX_EXCERPT_BYTES`] at most (cut on a character
/// boundary) marked as cut with the bytes left out: `abc…(+99872 bytes)`.
pub fn excerpt(s: &str) -> Cow<'_, str> {
    cut(s, MAX_EXCERPT_BYTES)
}

/// [`excerpt`] to at most `max` bytes.
pub fn cut(s: &str, max: usize) -> Cow<'_, str> {
    if s.len() <= max {
        return Cow::Borrowed(s);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}…(+{} bytes)", &s[..end], s.len() - end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_inputs_are_cut_and_marked() {
        assert_eq!(cut("abcdef", 3), "abc…(+3 bytes)");
        assert_eq!(excerpt("short"), "short");
        let exact = "x".repeat(MAX_EXCERPT_BYTES);
        assert_eq!(excerpt(&exact), exact);
        let long = "y".repeat(100_000);
        assert_eq!(
            excerpt(&long),
            format!("{}…(+{} bytes)", "y".repeat(128), 100_000 - 128)
        );
        // A multi-byte character across the cut is left out whole.
        let wide = format!("{}é{}", "a".repeat(127), "b".repeat(10));
        assert_eq!(excerpt(&wide), format!("{}…(+12 bytes)", "a".repeat(127)));
    }
}
