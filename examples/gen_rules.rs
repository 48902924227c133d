//! Writes a synthetic config of N rules over F files (one domain each) into a directory, for
//! the reload measurements: `sluice check DIR`, or a server with `--config DIR`.
//!
//! ```sh
//! cargo run --release --example gen_rules -- /tmp/rules-10k 10000 4
//! ```
//!
//! The mix of rule shapes is [`sluice::config::synthetic`]'s.

use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: gen_rules DIR RULES [FILES]";
    let dir = PathBuf::from(args.next().ok_or_else(|| anyhow::anyhow!(usage))?);
    let rules: usize = args.next().ok_or_else(|| anyhow::anyhow!(usage))?.parse()?;
    let files: usize = args.next().map_or(Ok(4), |f| f.parse())?;
    std::fs::create_dir_all(&dir)?;
    for (name, yaml) in sluice::config::synthetic::files(rules, files) {
        std::fs::write(dir.join(name), yaml)?;
    }
    println!("wrote {rules} rules in {files} files to {}", dir.display());
    Ok(())
}
