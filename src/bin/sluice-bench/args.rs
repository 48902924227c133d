//! Argument values that clap does not parse by itself: durations (the library's grammar) and
//! descriptor templates (`k=v,k2=v{i}`), with the `{i}` substitution done per request.

/// Durations (`500ms`, `1.5s`, `1m`): the grammar of the flags and the config.
pub(crate) use sluice::rules::duration::parse as parse_duration;

/// `HOST:PORT`, kept as text (a host name is fine): only checked for the port.
pub(crate) fn parse_host_port(s: &str) -> Result<String, String> {
    match s.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(s.to_string()),
        _ => Err(format!("`{s}`: expected HOST:PORT")),
    }
}

/// One part of a value: literal bytes or the key index.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Lit(Vec<u8>),
    Index,
}

/// One descriptor of every request: entries whose values may contain `{i}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DescriptorTemplate {
    entries: Vec<(Vec<u8>, Vec<Part>)>,
}

impl DescriptorTemplate {
    /// Parses `k=v,k2=v{i}`: comma-separated `key=value` entries (values may be empty,
    /// keys may not). `{i}` may appear in values only.
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        let mut entries = Vec::new();
        for entry in s.split(',') {
            let (k, v) = entry
                .split_once('=')
                .ok_or_else(|| format!("`{entry}` in `{s}`: expected key=value"))?;
            if k.is_empty() {
                return Err(format!("`{entry}` in `{s}`: empty key"));
            }
            if k.contains("{i}") {
                return Err(format!(
                    "`{entry}` in `{s}`: {{i}} is allowed in values only"
                ));
            }
            let mut parts = Vec::new();
            for (n, lit) in v.split("{i}").enumerate() {
                if n > 0 {
                    parts.push(Part::Index);
                }
                if !lit.is_empty() {
                    parts.push(Part::Lit(lit.as_bytes().to_vec()));
                }
            }
            entries.push((k.as_bytes().to_vec(), parts));
        }
        Ok(DescriptorTemplate { entries })
    }

    /// Whether any value contains `{i}`.
    pub(crate) fn uses_index(&self) -> bool {
        self.entries
            .iter()
            .any(|(_, parts)| parts.contains(&Part::Index))
    }

    /// The entries with `{i}` replaced by `index`.
    pub(crate) fn render(&self, index: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
        let digits = index.to_string();
        self.entries
            .iter()
            .map(|(k, parts)| {
                let mut v = Vec::with_capacity(16);
                for p in parts {
                    match p {
                        Part::Lit(b) => v.extend_from_slice(b),
                        Part::Index => v.extend_from_slice(digits.as_bytes()),
                    }
                }
                (k.clone(), v)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port() {
        assert!(parse_host_port("127.0.0.1:8081").is_ok());
        assert!(parse_host_port("localhost:1").is_ok());
        for bad in ["127.0.0.1", ":80", "h:99999", "h:x"] {
            assert!(parse_host_port(bad).is_err(), "{bad}");
        }
    }

    fn render(t: &str, i: u64) -> Vec<(String, String)> {
        DescriptorTemplate::parse(t)
            .unwrap()
            .render(i)
            .into_iter()
            .map(|(k, v)| (String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap()))
            .collect()
    }

    #[test]
    fn index_substitution() {
        let pairs = |v: &[(&str, &str)]| {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(render("k=v", 7), pairs(&[("k", "v")]));
        assert_eq!(render("k=v{i}", 7), pairs(&[("k", "v7")]));
        assert_eq!(render("k={i}", 42), pairs(&[("k", "42")]));
        assert_eq!(
            render("a=x,b={i}-{i}-y", 3),
            pairs(&[("a", "x"), ("b", "3-3-y")])
        );
        assert_eq!(render("k=", 0), pairs(&[("k", "")]));
        assert!(!DescriptorTemplate::parse("k=v").unwrap().uses_index());
        assert!(DescriptorTemplate::parse("a=1,k=v{i}")
            .unwrap()
            .uses_index());
    }

    #[test]
    fn bad_descriptors() {
        for bad in ["", "k", "=v", "k=v,", "{i}=v", "a=1,,b=2"] {
            assert!(DescriptorTemplate::parse(bad).is_err(), "{bad:?}");
        }
    }
}
