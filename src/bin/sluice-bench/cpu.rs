//! CPU time of processes from /proc (Linux): user + system seconds of a PID or of this process.

/// Clock ticks per second of /proc/PID/stat's utime and stime: USER_HZ, 100 on every Linux
/// architecture sluice targets (it is fixed by the kernel ABI, not by CONFIG_HZ).
const USER_HZ: f64 = 100.0;

/// User + system CPU seconds of `pid` (`None`: this process) so far.
pub(crate) fn cpu_seconds(pid: Option<u32>) -> Result<f64, String> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/stat"),
        None => "/proc/self/stat".to_string(),
    };
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))?;
    parse_stat(&text).ok_or_else(|| format!("cannot parse {path}"))
}

/// utime + stime (fields 14 and 15) of a /proc/PID/stat line, in seconds. The command name
/// (field 2) is in parentheses and may hold spaces or parentheses: fields are counted after
/// the last `)`.
fn parse_stat(text: &str) -> Option<f64> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    // After `)`: field 3 (state) is the first; utime is field 14, the 12th from there.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

/// The summed CPU seconds of several processes.
pub(crate) fn sum_cpu_seconds(pids: &[u32]) -> Result<f64, String> {
    pids.iter().map(|&p| cpu_seconds(Some(p))).sum()
}

/// Resident set size of this process in bytes, from /proc/self/statm (pages of 4 KiB).
pub(crate) fn rss_bytes() -> Result<u64, String> {
    let text = std::fs::read_to_string("/proc/self/statm")
        .map_err(|e| format!("cannot read /proc/self/statm: {e}"))?;
    let pages: u64 = text
        .split_ascii_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("cannot parse /proc/self/statm")?;
    Ok(pages * 4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_after_the_name() {
        let line = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 130 0 0 20 0 1 0";
        assert_eq!(parse_stat(line), Some(3.8));
        assert_eq!(parse_stat("1 (x) S 1 2"), None);
    }

    #[test]
    fn this_process_is_readable() {
        assert!(cpu_seconds(None).unwrap() >= 0.0);
        assert!(rss_bytes().unwrap() > 0);
    }
}
