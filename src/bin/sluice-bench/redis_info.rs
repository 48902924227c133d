//! Redis counters over raw RESP (no client library): `INFO commandstats` (calls per command)
//! and `INFO cpu` (used_cpu_sys + used_cpu_user), read before and after a measured interval.

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// One reading of one or more Redis nodes, summed.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Sample {
    /// Calls per command name (`evalsha`, `script|load`, ...).
    pub calls: BTreeMap<String, u64>,
    /// Microseconds spent in each command, as Redis counts them.
    pub usec: BTreeMap<String, u64>,
    pub cpu_s: f64,
}

impl Sample {
    /// `self - before`, per command (commands with no new calls are left out), and CPU. The
    /// INFO commands of the readings themselves are left out.
    pub(crate) fn since(&self, before: &Sample) -> Sample {
        let diff = |now: &BTreeMap<String, u64>, then: &BTreeMap<String, u64>| {
            now.iter()
                .filter(|(name, _)| name.as_str() != "info")
                .filter_map(|(name, &n)| {
                    let d = n.saturating_sub(then.get(name).copied().unwrap_or(0));
                    (d > 0).then(|| (name.clone(), d))
                })
                .collect::<BTreeMap<_, _>>()
        };
        Sample {
            calls: diff(&self.calls, &before.calls),
            usec: diff(&self.usec, &before.usec),
            cpu_s: self.cpu_s - before.cpu_s,
        }
    }

    fn add(&mut self, other: Sample) {
        for (k, v) in other.calls {
            *self.calls.entry(k).or_default() += v;
        }
        for (k, v) in other.usec {
            *self.usec.entry(k).or_default() += v;
        }
        self.cpu_s += other.cpu_s;
    }
}

/// Reads every node in `addrs` and sums them.
pub(crate) async fn sample(addrs: &[String]) -> anyhow::Result<Sample> {
    let mut total = Sample::default();
    for addr in addrs {
        let text = info(addr).await?;
        total.add(parse(&text));
    }
    Ok(total)
}

/// The text of `INFO commandstats` and `INFO cpu` of one node.
async fn info(addr: &str) -> anyhow::Result<String> {
    let stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("cannot connect to Redis at {addr}"))?;
    let mut stream = BufReader::new(stream);
    let mut text = String::new();
    for section in ["commandstats", "cpu"] {
        let cmd = format!("*2\r\n$4\r\nINFO\r\n${}\r\n{section}\r\n", section.len());
        stream.get_mut().write_all(cmd.as_bytes()).await?;
        text.push_str(
            &read_bulk(&mut stream)
                .await
                .with_context(|| format!("INFO {section} at {addr}"))?,
        );
    }
    Ok(text)
}

/// Reads one RESP bulk string reply (`$len\r\n...\r\n`); an error reply (`-ERR ...`) fails.
pub(crate) async fn read_bulk<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
) -> anyhow::Result<String> {
    let mut header = String::new();
    r.read_line(&mut header).await?;
    let header = header.trim_end();
    let Some(len) = header.strip_prefix('$') else {
        bail!("unexpected reply {header:?}");
    };
    let len: usize = len
        .parse()
        .with_context(|| format!("bad length in {header:?}"))?;
    let mut buf = vec![0; len + 2];
    r.read_exact(&mut buf).await?;
    buf.truncate(len);
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Parses INFO text: `cmdstat_NAME:calls=N,usec=N,...` and `used_cpu_sys:F` / `used_cpu_user:F`.
fn parse(text: &str) -> Sample {
    let mut s = Sample::default();
    for line in text.lines() {
        let Some((key, value)) = line.trim_end().split_once(':') else {
            continue;
        };
        if let Some(name) = key.strip_prefix("cmdstat_") {
            for field in value.split(',') {
                match field.split_once('=') {
                    Some(("calls", n)) => {
                        s.calls.insert(name.to_string(), n.parse().unwrap_or(0));
                    }
                    Some(("usec", n)) => {
                        s.usec.insert(name.to_string(), n.parse().unwrap_or(0));
                    }
                    _ => {}
                }
            }
        } else if key == "used_cpu_sys" || key == "used_cpu_user" {
            s.cpu_s += value.parse::<f64>().unwrap_or(0.0);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_commandstats_and_cpu() {
        let text = "# Commandstats\r\n\
            cmdstat_evalsha:calls=120,usec=840,usec_per_call=7.00,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_info:calls=4,usec=90,usec_per_call=22.50,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_script|load:calls=1,usec=30,usec_per_call=30.00\r\n\
            # CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\n\
            used_cpu_sys_children:9.0\r\n";
        let s = parse(text);
        assert_eq!(s.calls["evalsha"], 120);
        assert_eq!(s.usec["evalsha"], 840);
        assert_eq!(s.calls["script|load"], 1);
        assert!((s.cpu_s - 3.75).abs() < 1e-9);
        let mut later = s.clone();
        *later.calls.get_mut("evalsha").unwrap() += 30;
        *later.calls.get_mut("info").unwrap() += 2;
        later.cpu_s += 0.25;
        let d = later.since(&s);
        assert_eq!(d.calls.len(), 1, "{d:?}");
        assert_eq!(d.calls["evalsha"], 30);
        assert!((d.cpu_s - 0.25).abs() < 1e-9);
    }
}
