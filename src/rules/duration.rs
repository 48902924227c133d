//! The one duration grammar of flags (`--drain-timeout 1d`), the config (`window: 1.5s`),
//! `sluice check --requests` and `sluice-bench`: a decimal number and a unit, `us` (or `µs`),
//! `ms`, `s`, `m` (or `min`), `h` or `d`; a bare number is seconds. Fractions are exact (no
//! floating point): `1.5s` is 1,500,000 µs. Where a duration must be positive or bounded,
//! the user of the value says so.

use std::time::Duration;

/// A text that is no duration of the grammar.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration '{0}' ({EXPECTED})")]
pub struct InvalidDuration(pub String);

/// What the grammar takes, for messages.
pub const EXPECTED: &str = "expected a number and us, ms, s, m, h or d, e.g. 250ms, 1.5s, 2h, 7d";

/// Nanoseconds per unit.
const UNITS: &[(&str, u128)] = &[
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("", 1_000_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("min", 60_000_000_000),
    ("h", 3_600_000_000_000),
    ("d", 86_400_000_000_000),
];

/// Parses a duration of the grammar.
pub fn parse(s: &str) -> Result<Duration, InvalidDuration> {
    let bad = || InvalidDuration(s.to_string());
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let per = UNITS
        .iter()
        .find(|(u, _)| *u == unit)
        .map(|(_, n)| *n)
        .ok_or_else(bad)?;
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |d: &str| !d.is_empty() && d.len() <= 30 && d.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || (number.contains('.') && !digits(fraction)) {
        return Err(bad());
    }
    let whole: u128 = whole.parse().map_err(|_| bad())?;
    let mut nanos = whole.checked_mul(per).ok_or_else(bad)?;
    if !fraction.is_empty() {
        let scale = 10u128.pow(fraction.len() as u32);
        let part: u128 = fraction.parse().map_err(|_| bad())?;
        nanos = nanos.checked_add(part * per / scale).ok_or_else(bad)?;
    }
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| bad())
}

/// Prints `d` in the grammar, in the largest unit that keeps it exact (`90s` is `90s`, `2h`
/// is `2h`); parsing the text gives `d` back.
pub fn format(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    for (unit, per) in [
        ("d", 86_400_000_000_000u128),
        ("h", 3_600_000_000_000),
        ("m", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("us", 1_000),
    ] {
        if nanos.is_multiple_of(per) {
            return format!("{}{unit}", nanos / per);
        }
    }
    let text = format!("{}.{:09}", d.as_secs(), d.subsec_nanos());
    format!("{}s", text.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grammar() {
        let ok = [
            ("250us", Duration::from_micros(250)),
            ("500ms", Duration::from_millis(500)),
            ("1.5s", Duration::from_millis(1500)),
            ("0.25ms", Duration::from_micros(250)),
            ("3", Duration::from_secs(3)),
            (" 10s ", Duration::from_secs(10)),
            ("2m", Duration::from_secs(120)),
            ("1min", Duration::from_secs(60)),
            ("2h", Duration::from_secs(7200)),
            ("1d", Duration::from_secs(86_400)),
            ("0s", Duration::ZERO),
        ];
        for (s, d) in ok {
            assert_eq!(parse(s), Ok(d), "{s}");
        }
        for bad in [
            "",
            "s",
            "10x",
            "1..2s",
            "-1s",
            "ms10",
            "1.s",
            ".5s",
            "3 weeks",
            "1w",
            "99999999999999999999d",
        ] {
            assert_eq!(parse(bad), Err(InvalidDuration(bad.into())), "{bad}");
        }
    }

    #[test]
    fn printing_round_trips() {
        for s in ["0s", "90s", "2h", "7d", "1500ms", "250us", "0.0000015s"] {
            assert_eq!(format(parse(s).unwrap()), s);
        }
    }
}
