//! The Prometheus text exposition as the tests read it: samples by name and labels.

use std::collections::BTreeMap;

/// One sample of a Prometheus text exposition: name and labels.
pub type Series = (String, BTreeMap<String, String>);

/// Parses the Prometheus text format into samples.
pub fn parse_prometheus(text: &str) -> BTreeMap<Series, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("sample line");
        let value: f64 = value.parse().expect("sample value");
        let (name, labels) = match series.split_once('{') {
            None => (series.to_string(), BTreeMap::new()),
            Some((name, rest)) => {
                let rest = rest.strip_suffix('}').expect("closing brace");
                let mut labels = BTreeMap::new();
                let mut chars = rest.chars().peekable();
                while chars.peek().is_some() {
                    let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
                    assert_eq!(chars.next(), Some('"'), "{line}");
                    let mut value = String::new();
                    while let Some(c) = chars.next() {
                        match c {
                            '\\' => value.push(chars.next().expect("escaped char")),
                            '"' => break,
                            c => value.push(c),
                        }
                    }
                    if chars.peek() == Some(&',') {
                        chars.next();
                    }
                    labels.insert(key, value);
                }
                (name.to_string(), labels)
            }
        };
        out.insert((name, labels), value);
    }
    out
}

/// The value of `name{labels}` (labels given as `k=v` pairs, exactly the series' labels).
pub fn sample(m: &BTreeMap<Series, f64>, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    m.get(&(name.to_string(), labels)).copied()
}
