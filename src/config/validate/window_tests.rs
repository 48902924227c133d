//! Window lengths as YAML writes them.

use super::*;

fn window(s: &str) -> Result<Micros, String> {
    duration_of("window", s)
}

#[test]
fn windows() {
    assert_eq!(window("500ms"), Ok(500_000));
    assert_eq!(window("30s"), Ok(30_000_000));
    assert_eq!(window("1.5s"), Ok(1_500_000));
    assert_eq!(window("2h"), Ok(7_200_000_000));
    assert_eq!(window("7d"), Ok(604_800_000_000));
    assert!(window("0s").is_err());
    assert!(window("1w").is_err());
    assert!(window("s").is_err());
    assert!(window("0.5us").is_err());
    assert!(window("99999999999999d").is_err());
}
