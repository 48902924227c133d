//! Config errors: one fixture per case under `tests/fixtures/config_errors/`, each with its
//! exact message and position; `sluice check` through the real binary; the duplicate-domain
//! rule and `--merge-domains`; a Kubernetes ConfigMap mount.

use std::path::{Path, PathBuf};
use std::process::Command;

use sluice::config::{self, LoadOptions};

use cases::CASES;

mod cases;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn errors_of(path: &Path, opts: LoadOptions) -> Vec<String> {
    match config::load(&[path.to_path_buf()], opts) {
        Ok(_) => Vec::new(),
        Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
    }
}

#[test]
fn every_fixture_gives_its_exact_errors() {
    let dir = fixtures().join("config_errors");
    let mut failures = Vec::new();
    for (file, want) in CASES {
        let path = dir.join(file);
        let got = errors_of(&path, LoadOptions::default());
        let want: Vec<String> = want
            .iter()
            .map(|w| format!("{}:{w}", path.display()))
            .collect();
        if got != want {
            failures.push(format!("{file}:\n  got  {got:#?}\n  want {want:#?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_fixture_is_in_the_table() {
    let mut on_disk: Vec<String> = std::fs::read_dir(fixtures().join("config_errors"))
        .expect("fixtures")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = CASES.iter().map(|(f, _)| f.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed);
}

/// The other side of the algorithm-key fixtures: every algorithm with the keys it takes loads.
#[test]
fn each_algorithm_with_its_keys_loads() {
    let path = fixtures().join("each_algorithm.yaml");
    assert_eq!(
        errors_of(&path, LoadOptions::default()),
        Vec::<String>::new()
    );
}

fn sluice(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("run sluice");
    (
        out.status.code().expect("exit code"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_reports_every_error_of_every_file_in_a_directory() {
    let dir = fixtures().join("config_errors");
    let dir_s = dir.display().to_string();
    let (code, stdout, _) = sluice(&["check", &dir_s]);
    assert_eq!(code, 1);
    // Files load in name order; each prints all its errors.
    let mut sorted: Vec<&(&str, &[&str])> = CASES.iter().collect();
    sorted.sort_by_key(|(f, _)| *f);
    let dir_s = dir_s.as_str();
    let want: Vec<String> = sorted
        .iter()
        .flat_map(|(f, errs)| errs.iter().map(move |e| format!("{dir_s}/{f}:{e}")))
        .collect();
    let got: Vec<&str> = stdout.lines().collect();
    assert_eq!(got, want);
}

#[test]
fn check_one_bad_file_and_one_good_file() {
    let bad = fixtures().join("config_errors/bad_unit.yaml");
    let bad_s = bad.display().to_string();
    let (code, stdout, _) = sluice(&["check", &bad_s]);
    assert_eq!(code, 1);
    assert_eq!(
        stdout,
        format!(
            "{bad_s}:5:13: invalid rate limit unit 'fortnight' (expected second, minute, hour, \
             day, week, month or year)\n"
        )
    );

    let good = fixtures().join("duplicate_domain/b.yaml");
    let good_s = good.display().to_string();
    let (code, stdout, _) = sluice(&["check", &good_s]);
    assert_eq!(code, 0);
    assert_eq!(stdout, format!("domain other: 1 rules ({good_s})\n"));
}

#[test]
fn the_same_domain_in_two_files_needs_merge_domains() {
    let dir = fixtures().join("duplicate_domain");
    let d = dir.display().to_string();
    let errors = errors_of(&dir, LoadOptions::default());
    assert_eq!(
        errors,
        [format!(
            "{d}/c.yaml:2:9: duplicate domain 'shared' (first defined at {d}/a.yaml:1:9); pass \
             --merge-domains to merge files of one domain"
        )]
    );
    let (code, stdout, _) = sluice(&["check", &d]);
    assert_eq!(code, 1);
    assert_eq!(stdout.trim_end(), errors[0]);

    let rules = config::load(
        std::slice::from_ref(&dir),
        LoadOptions {
            merge_domains: true,
            ..LoadOptions::default()
        },
    )
    .expect("merged");
    assert_eq!(
        rules.rule_counts(),
        [("other".into(), 1), ("shared".into(), 2)]
    );
    let (code, stdout, _) = sluice(&["check", "--merge-domains", &d]);
    assert_eq!(code, 0);
    assert_eq!(
        stdout,
        format!(
            "domain other: 1 rules ({d}/b.yaml)\ndomain shared: 2 rules ({d}/a.yaml, {d}/c.yaml)\n"
        )
    );
}

#[test]
fn a_mounted_configmap_loads_each_file_once() {
    // What the kubelet writes: the files in a timestamped dot-directory, `..data` pointing at
    // it, and a visible symlink per key through `..data`.
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path();
    let stamp = root.join("..2024_01_01_00_00_00.123456789");
    std::fs::create_dir(&stamp).unwrap();
    std::fs::write(
        stamp.join("api.yaml"),
        "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    )
    .unwrap();
    std::fs::write(
        stamp.join("web.yml"),
        "domain: web\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n  - key: j\n    rate_limit: {unlimited: true}\n",
    )
    .unwrap();
    std::os::unix::fs::symlink(stamp.file_name().unwrap(), root.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/api.yaml", root.join("api.yaml")).unwrap();
    std::os::unix::fs::symlink("..data/web.yml", root.join("web.yml")).unwrap();
    // Neither dot-files nor other extensions are config.
    std::fs::write(root.join(".hidden.yaml"), "not: [valid").unwrap();
    std::fs::write(root.join("README.txt"), "not config").unwrap();

    let rules = config::load(&[root.to_path_buf()], LoadOptions::default()).expect("loads");
    assert_eq!(rules.rule_counts(), [("api".into(), 1), ("web".into(), 2)]);
    let paths: Vec<&str> = rules.sources.iter().map(|s| &*s.path).collect();
    let r = root.display().to_string();
    assert_eq!(paths, [format!("{r}/api.yaml"), format!("{r}/web.yml")]);

    let (code, stdout, _) = sluice(&["check", &r]);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(
        stdout,
        format!("domain api: 1 rules ({r}/api.yaml)\ndomain web: 2 rules ({r}/web.yml)\n")
    );
}

#[test]
fn a_missing_path_is_an_error_not_a_panic() {
    let (code, stdout, stderr) = sluice(&["check", "/nonexistent/sluice.yaml"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stdout.starts_with("/nonexistent/sluice.yaml:1:1: cannot read config path: "),
        "{stdout}"
    );
}

#[test]
fn check_of_a_path_with_no_config_file_fails() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let d = dir.display().to_string();
    let file = dir.join("config.yaml");
    let f = file.display().to_string();
    let link = |target: &str| std::os::unix::fs::symlink(target, &file).unwrap();
    // (case, how the directory is left, what `sluice check` prints)
    let cases: [(&str, &dyn Fn(), String); 4] = [
        (
            "empty directory",
            &|| (),
            format!(
                "{d}:1:1: no config file found (a directory's *.yaml and *.yml files are \
                 loaded); pass --allow-empty-config to run with no rules"
            ),
        ),
        (
            "dangling symlink",
            &|| link("gone.yaml"),
            format!("{f}:1:1: cannot read config file: No such file or directory (os error 2)"),
        ),
        (
            "looping symlink",
            &|| link("config.yaml"),
            format!(
                "{f}:1:1: cannot read config file: Too many levels of symbolic links (os error \
                 40)"
            ),
        ),
        (
            // Unreadable whoever reads it, root included: reading its offset 0 fails with EIO.
            "unreadable file",
            &|| link("/proc/self/mem"),
            format!("{f}:1:1: cannot read file: Input/output error (os error 5)"),
        ),
    ];
    for (case, leave, want) in cases {
        let _ = std::fs::remove_file(&file);
        leave();
        let (code, stdout, _) = sluice(&["check", &d]);
        assert_eq!((code, stdout.trim_end()), (1, want.as_str()), "{case}");
    }

    // Asked for explicitly, an empty config is fine.
    std::fs::remove_file(&file).unwrap();
    let (code, stdout, _) = sluice(&["check", "--allow-empty-config", &d]);
    assert_eq!((code, stdout.as_str()), (0, "no config files found\n"));
    let rules = config::load(
        &[dir.to_path_buf()],
        LoadOptions {
            allow_empty: true,
            ..LoadOptions::default()
        },
    )
    .expect("an empty config, as asked");
    assert!(rules.domains.is_empty());
}
