//! Wildcard values: `*` matches any run of bytes (including none), anywhere in the value and
//! any number of times; the pattern is anchored at both ends.

/// A compiled wildcard pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern {
    source: Box<[u8]>,
    /// The literal pieces between the stars; `segments.len() == stars + 1`.
    segments: Vec<Box<[u8]>>,
}

impl Pattern {
    /// `None` when `source` has no `*` (an exact value).
    pub fn compile(source: &[u8]) -> Option<Pattern> {
        if !source.contains(&b'*') {
            return None;
        }
        let segments = source.split(|&b| b == b'*').map(Box::from).collect();
        Some(Pattern {
            source: source.into(),
            segments,
        })
    }

    pub fn source(&self) -> &[u8] {
        &self.source
    }

    /// The literal bytes before the first `*`.
    pub fn prefix(&self) -> &[u8] {
        self.segments.first().map_or(&[], |s| &s[..])
    }

    /// The literal bytes after the last `*`.
    pub fn suffix(&self) -> &[u8] {
        self.segments.last().map_or(&[], |s| &s[..])
    }

    /// The non-empty literal pieces between the first and the last `*`, in order (`**` is
    /// `*`, so empty pieces say nothing).
    pub fn middles(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let inner = self.segments.len().saturating_sub(2);
        self.segments
            .iter()
            .skip(1)
            .take(inner)
            .map(|s| &s[..])
            .filter(|s| !s.is_empty())
    }

    pub fn matches(&self, value: &[u8]) -> bool {
        let (first, rest) = match self.segments.split_first() {
            Some(x) => x,
            None => return false,
        };
        let (last, middle) = match rest.split_last() {
            Some(x) => x,
            None => return value == &first[..],
        };
        if value.len() < first.len() + last.len()
            || !value.starts_with(first)
            || !value.ends_with(last)
        {
            return false;
        }
        // With only `*`, taking each middle piece at its leftmost position is optimal.
        let mut hay = &value[first.len()..value.len() - last.len()];
        for piece in middle {
            match find(hay, piece) {
                Some(at) => hay = &hay[at + piece.len()..],
                None => return false,
            }
        }
        true
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn m(p: &str, v: &str) -> bool {
        Pattern::compile(p.as_bytes())
            .unwrap()
            .matches(v.as_bytes())
    }

    #[test]
    fn table() {
        let cases = [
            ("*", "", true),
            ("*", "anything", true),
            ("/api/*", "/api/", true),
            ("/api/*", "/api/v1/x", true),
            ("/api/*", "/apx/v1", false),
            ("*.example.com", "a.example.com", true),
            ("*.example.com", "example.com", false),
            ("a*b*c", "abc", true),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXcYb", false),
            ("a*a", "a", false),
            ("a*a", "aa", true),
            ("**", "x", true),
            ("user-*-admin", "user-42-admin", true),
            ("user-*-admin", "user-42-admins", false),
        ];
        for (p, v, want) in cases {
            assert_eq!(m(p, v), want, "{p} ~ {v}");
        }
        assert!(Pattern::compile(b"plain").is_none());
    }

    /// Reference: textbook recursive glob.
    fn reference(p: &[u8], v: &[u8]) -> bool {
        match p.split_first() {
            None => v.is_empty(),
            Some((b'*', rest)) => (0..=v.len()).any(|i| reference(rest, &v[i..])),
            Some((c, rest)) => v.first() == Some(c) && reference(rest, &v[1..]),
        }
    }

    proptest! {
        #[test]
        fn agrees_with_reference(p in "[ab*]{1,6}", v in "[ab]{0,8}") {
            if let Some(pat) = Pattern::compile(p.as_bytes()) {
                prop_assert_eq!(pat.matches(v.as_bytes()), reference(p.as_bytes(), v.as_bytes()));
            }
        }
    }
}
