//! Config errors: one fixture per case under `tests/fixtures/config_errors/`, each with its
//! exact message and position; `sluice check` through the real binary; the duplicate-domain
//! rule and `--merge-domains`; a Kubernetes ConfigMap mount.

use std::path::{Path, PathBuf};
use std::process::Command;

use sluice::config::{self, LoadOptions};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// `(fixture, ["line:column: message", ...])`: every error the file must produce, in order.
const CASES: &[(&str, &[&str])] = &[
    (
        "unknown_key.yaml",
        &[
            "5:5: unknown key 'ratelimit' (expected one of: key, value, rate_limit, rate_limits, \
           descriptors, shadow_mode, detailed_metric, value_to_metric, share_threshold, quota_mode, \
           metadata)",
        ],
    ),
    (
        "type_error_and_more.yaml",
        &[
            "5:51: invalid u32: expected a whole number from 0 to 4294967295",
            "7:78: invalid u32: expected a whole number from 0 to 4294967295",
            "9:24: invalid rate limit unit 'fortnight' (expected second, minute, hour, day, week, \
             month or year)",
            "9:54: invalid u32: expected a whole number from 0 to 4294967295",
        ],
    ),
    (
        "unknown_keys_and_more.yaml",
        &[
            "5:5: unknown key 'ratelimit' (expected one of: key, value, rate_limit, rate_limits, \
             descriptors, shadow_mode, detailed_metric, value_to_metric, share_threshold, \
             quota_mode, metadata)",
            "7:24: invalid rate limit unit 'fortnight' (expected second, minute, hour, day, week, \
             month or year)",
            "9:54: unknown key 'algoritm' (expected one of: requests_per_unit, unit, unlimited, \
             name, replaces, charge, on_store_error, window, algorithm, max_in_flight, lease_time, \
             burst, precision, align, timezone)",
            "9:81: replaces entry must have a non-empty name",
            "9:82: unknown key 'nam' (expected one of: name)",
            "10:5: duplicate descriptor composite key 'unknown_keys_and_more.a'",
            "11:1: unknown key 'shadow' (expected one of: domain, descriptors, allow_refunds, \
             allow_reservations, on_store_error, redis_hash_tag, allow_overrides)",
        ],
    ),
    (
        "unknown_top_level_key.yaml",
        &["2:1: unknown key 'descriptor' (expected one of: domain, descriptors, allow_refunds, \
           allow_reservations, on_store_error, redis_hash_tag, allow_overrides)"],
    ),
    (
        "empty_domain.yaml",
        &["1:9: config file cannot have empty domain"],
    ),
    (
        "missing_domain.yaml",
        &["1:1: config file cannot have empty domain"],
    ),
    (
        "empty_file.yaml",
        &["1:1: config file cannot have empty domain"],
    ),
    ("empty_key.yaml", &["3:10: descriptor has empty key"]),
    ("missing_key.yaml", &["3:5: descriptor has empty key"]),
    (
        "duplicate_descriptor.yaml",
        &["6:5: duplicate descriptor composite key 'duplicate_descriptor.k_v'"],
    ),
    (
        "duplicate_nested_default.yaml",
        &["8:9: duplicate descriptor composite key 'duplicate_nested_default.outer_o.inner'"],
    ),
    (
        "duplicate_wildcard.yaml",
        &["5:5: duplicate descriptor composite key 'duplicate_wildcard.path_/api/*'"],
    ),
    (
        "duplicate_map_key.yaml",
        &["5:5: duplicate key 'rate_limit' in one map"],
    ),
    (
        "bad_unit.yaml",
        &[
            "5:13: invalid rate limit unit 'fortnight' (expected second, minute, hour, day, week, \
           month or year)",
        ],
    ),
    (
        "missing_unit.yaml",
        &["5:7: rate_limit needs a unit (second, minute, hour, day, week, month or year)"],
    ),
    (
        "unit_with_unlimited.yaml",
        &["6:13: should not specify rate limit unit when unlimited"],
    ),
    (
        "replaces_itself.yaml",
        &["9:17: rate limit 'mine' cannot replace itself"],
    ),
    (
        "replaces_empty_name.yaml",
        &["9:11: replaces entry must have a non-empty name"],
    ),
    (
        "non_string_key.yaml",
        &["4:7: expected a string here (keys and values must be strings)"],
    ),
    (
        "non_map_list_item.yaml",
        &["5:5: expected a map here (descriptors and rate_limit are maps of key: value)"],
    ),
    (
        "share_threshold_without_wildcard.yaml",
        &[
            "5:22: share_threshold can only be used with a wildcard value (containing '*'), but \
           'share_threshold_without_wildcard.k_v' has none",
        ],
    ),
    (
        "malformed_yaml.yaml",
        &["4:4: while parsing a block collection, did not find expected '-' indicator"],
    ),
    (
        // A syntax error ends the typed parse, but the unknown keys above it are still found.
        "syntax_error_after_unknown_key.yaml",
        &[
            "4:5: unknown key 'ratelimit' (expected one of: key, value, rate_limit, rate_limits, \
           descriptors, shadow_mode, detailed_metric, value_to_metric, share_threshold, quota_mode, \
           metadata)",
            "8:8: while parsing a flow mapping, did not find expected ',' or '}'",
        ],
    ),
    (
        "fractional_requests.yaml",
        &["4:51: invalid u32: expected a whole number from 0 to 4294967295"],
    ),
    (
        "metadata_not_a_map.yaml",
        &["4:15: metadata must be a map of key: value"],
    ),
    (
        "invalid_charge.yaml",
        &["4:62: invalid charge 'sometimes' (expected always or if_admitted)"],
    ),
    (
        "invalid_store_settings.yaml",
        &[
            "2:17: invalid on_store_error 'closed' (expected unavailable, allow, deny or local)",
            "3:17: invalid redis_hash_tag 'everything' (expected descriptor or domain)",
            "6:70: invalid on_store_error 'open' (expected unavailable, allow, deny or local)",
        ],
    ),
    (
        "concurrency_with_a_rate.yaml",
        &[
            "5:79: concurrency limits requests in flight, not a rate: use max_in_flight instead \
             of requests_per_unit",
            "5:94: invalid lease_time 'soon' (expected a number and us, ms, s, m, h or d, e.g. \
             250ms, 1.5s, 2h, 7d)",
            "7:17: concurrency needs max_in_flight (the most requests in flight; 0 blocks every \
             request)",
        ],
    ),
    (
        "several_errors.yaml",
        &[
            "8:9: duplicate descriptor composite key 'several_errors.a.b'",
            "9:28: invalid rate limit unit 'parsec' (expected second, minute, hour, day, week, \
             month or year)",
            "15:25: rate limit 'c' cannot replace itself",
            "16:10: descriptor has empty key",
        ],
    ),
];

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
