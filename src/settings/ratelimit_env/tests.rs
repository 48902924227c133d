//! Tests of the envoyproxy/ratelimit environment mapping, run through clap as `main` does.

use super::*;
use crate::settings::{Cli, Command};
use clap::{CommandFactory, FromArgMatches};
use std::collections::HashMap;

pub(super) fn run(argv: &[&str], env: &[(&str, &str)]) -> Result<(ServeArgs, Vec<String>), String> {
    let mut full = vec!["sluice", "serve"];
    full.extend(argv);
    let matches = Cli::command()
        .try_get_matches_from(full)
        .map_err(|e| e.to_string())?;
    let Command::Serve(mut args) = Cli::from_arg_matches(&matches).unwrap().command else {
        unreachable!()
    };
    let env: HashMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let sub = matches.subcommand_matches("serve").unwrap();
    let notes = apply(&mut args, sub, &|k| env.get(k).cloned())?;
    Ok((args, notes))
}

#[test]
fn upstream_variables_map_onto_settings() {
    let (a, notes) = run(
        &[],
        &[
            ("GRPC_PORT", "9001"),
            ("PORT", "9002"),
            ("RUNTIME_ROOT", "/data"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("REDIS_URL", "mymaster,s1:26379,s2:26379"),
            ("REDIS_TYPE", "sentinel"),
            ("REDIS_AUTH", "user:p@ss"),
            ("REDIS_TLS", "true"),
            ("REDIS_POOL_SIZE", "7"),
            ("SHADOW_MODE", "true"),
            ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false"),
            ("NEAR_LIMIT_RATIO", "0.5"),
            ("LOG_LEVEL", "WARN"),
            ("LOG_FORMAT", "json"),
            ("USE_PROMETHEUS", "true"),
            ("LOCAL_CACHE_SIZE_IN_BYTES", "1000"),
        ],
    )
    .unwrap();
    assert_eq!(a.grpc_addr, "0.0.0.0:9001".parse().unwrap());
    assert_eq!(a.http_addr, "0.0.0.0:9002".parse().unwrap());
    assert_eq!(a.config, vec![PathBuf::from("/data/ratelimit/config")]);
    assert_eq!(a.backend, Backend::Redis);
    assert_eq!(
        a.redis.redis_url,
        "rediss-sentinel://user:p%40ss@s1:26379,s2:26379?sentinelServiceName=mymaster"
    );
    assert_eq!(a.redis.redis_pool_size, 7);
    assert!(a.shadow_mode && a.charge_rejected);
    assert_eq!(a.near_limit_ratio, 0.5);
    assert_eq!(a.log.log_level, "warn");
    assert_eq!(a.log.log_format, LogFormat::Json);
    assert_eq!(a.prometheus_addr, Some("0.0.0.0:9090".parse().unwrap()));
    assert!(notes
        .iter()
        .any(|n| n.starts_with("LOCAL_CACHE_SIZE_IN_BYTES: ignored")));
}

#[test]
fn redis_client_certificate_maps_onto_the_tls_flags() {
    let pair = [
        ("REDIS_TLS_CLIENT_CERT", "/certs/client.pem"),
        ("REDIS_TLS_CLIENT_KEY", "/certs/client.key"),
    ];
    let (a, notes) = run(&["--config", "/c"], &pair).unwrap();
    assert_eq!(
        a.redis.redis_tls_cert,
        Some(PathBuf::from("/certs/client.pem"))
    );
    assert_eq!(
        a.redis.redis_tls_key,
        Some(PathBuf::from("/certs/client.key"))
    );
    assert!(!notes.iter().any(|n| n.contains("ignored")), "{notes:?}");
    // sluice's own pair wins over the variables.
    let (a, _) = run(
        &[
            "--config",
            "/c",
            "--redis-tls-cert",
            "/mine.pem",
            "--redis-tls-key",
            "/mine.key",
        ],
        &pair,
    )
    .unwrap();
    assert_eq!(a.redis.redis_tls_cert, Some(PathBuf::from("/mine.pem")));
    assert_eq!(a.redis.redis_tls_key, Some(PathBuf::from("/mine.key")));
}

#[test]
fn sluice_settings_win() {
    let (a, _) = run(
        &[
            "--config",
            "/mine",
            "--grpc-addr",
            "127.0.0.1:1",
            "--near-limit-ratio",
            "0.9",
        ],
        &[
            ("GRPC_PORT", "9001"),
            ("RUNTIME_ROOT", "/data"),
            ("NEAR_LIMIT_RATIO", "0.5"),
            ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
        ],
    )
    .unwrap();
    assert_eq!(a.grpc_addr, "127.0.0.1:1".parse().unwrap());
    assert_eq!(a.config, vec![PathBuf::from("/mine")]);
    assert_eq!(a.near_limit_ratio, 0.9);
    assert!(!a.charge_rejected);
}

#[test]
fn unsupported_meanings_fail() {
    let cfg = ["--config", "/c"];
    for env in [
        ("BACKEND_TYPE", "memcache"),
        ("REDIS_SOCKET_TYPE", "unix"),
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("SHADOW_MODE", "maybe"),
    ] {
        assert!(run(&cfg, &[env]).is_err(), "{env:?}");
    }
    assert!(run(&[], &[]).unwrap_err().contains("no config"));
    for half in ["REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY"] {
        let e = run(&cfg, &[(half, "/x.pem")]).unwrap_err();
        assert!(e.contains("set both or neither"), "{half}: {e}");
    }
    let (a, _) = run(&cfg, &[("REDIS_URL", "r:6379"), ("REDIS_AUTH", "secret")]).unwrap();
    assert_eq!(a.redis.redis_url, "redis://:secret@r:6379");
}
