//! The settings mapped onto each part: store, limiter, request limits, TLS, the xDS config
//! source, and the readers the store gauges use.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::watch;

use crate::clock::Clock;
use crate::config::xds::{XdsOptions, XdsTls};
use crate::limiter::{HeaderNames, LimiterOptions};
use crate::metrics::{MemoryCounts, ReadMemory, ReadRedis};
use crate::service::grpc::GrpcLimits;
use crate::service::limits::RequestLimits;
use crate::service::rlqs::RlqsOptions;
use crate::service::tls::{ReloadingTls, TlsError, TlsFiles};
use crate::settings::hardening::HardeningArgs;
use crate::settings::rlqs::RlqsArgs;
use crate::settings::xds::XdsArgs;
use crate::settings::{HeaderFormat, RedisArgs, ServeArgs};
use crate::store::redis::breaker::BreakerOptions;
use crate::store::redis::{ConnectOptions, RedisOptions};
use crate::store::{MemoryStore, RedisStore};
use crate::tasks;

/// An in-memory store bounded by `--memory-max-*`, swept while it lives.
pub(super) fn memory_store(args: &ServeArgs, clock: &Arc<dyn Clock>) -> Arc<MemoryStore> {
    let store =
        Arc::new(MemoryStore::new(args.memory_max_entries).with_max_bytes(args.memory_max_bytes));
    tasks::spawn_sweeper(&store, clock.clone());
    store
}

/// The size of an in-memory store, for its gauges (held weakly: they end with the store).
pub(super) fn read_memory(store: &Arc<MemoryStore>) -> ReadMemory {
    let weak = Arc::downgrade(store);
    Box::new(move || {
        weak.upgrade().map(|s| {
            let st = s.stats();
            MemoryCounts {
                entries: s.len() as u64,
                bytes: s.bytes() as u64,
                evictions: st.evictions.load(Ordering::Relaxed),
                evictions_over_limit: st.evictions_over_limit.load(Ordering::Relaxed),
            }
        })
    })
}

/// The Redis connection state, for its gauges (held weakly, like [`read_memory`]).
pub(super) fn read_redis(redis: &Arc<RedisStore>) -> ReadRedis {
    let weak = Arc::downgrade(redis);
    Box::new(move || {
        weak.upgrade().map(|r| {
            let s = r.status();
            (s.connected, s.breaker_open)
        })
    })
}

/// The Redis store's options from the `--redis-*` flags.
pub(super) fn redis_options(args: &RedisArgs) -> RedisOptions {
    RedisOptions {
        connect: ConnectOptions {
            url: args.redis_url.clone(),
            tls_ca: args.redis_tls_ca.clone(),
            tls_client: args.redis_tls_cert.clone().zip(args.redis_tls_key.clone()),
            username: args.redis_username.clone(),
            password: args.redis_password.clone(),
            password_file: args.redis_password_file.clone(),
            pool_size: args.redis_pool_size,
            connect_timeout: args.redis_connect_timeout,
        },
        command_timeout: args.redis_command_timeout,
        clock: args.clock,
        breaker: BreakerOptions {
            threshold: args.redis_breaker_failures.max(1),
            probe_every: args.redis_breaker_backoff,
        },
    }
}

pub(super) fn limiter_options(args: &ServeArgs) -> LimiterOptions {
    // A format given turns headers on; the bare --response-headers (and
    // LIMIT_RESPONSE_HEADERS_ENABLED) keeps meaning the draft-03 headers.
    let format = args
        .response_headers_format
        .or(args.response_headers.then_some(HeaderFormat::Legacy));
    LimiterOptions {
        shadow_mode: args.shadow_mode,
        quota_mode: args.quota_mode,
        charge_rejected: args.charge_rejected,
        response_headers: matches!(format, Some(HeaderFormat::Legacy | HeaderFormat::Both)).then(
            || HeaderNames {
                limit: args.header_limit.clone(),
                remaining: args.header_remaining.clone(),
                reset: args.header_reset.clone(),
            },
        ),
        ietf_headers: matches!(format, Some(HeaderFormat::Ietf | HeaderFormat::Both)),
        key_prefix: args.key_prefix.clone().into_bytes(),
        max_reservation_bytes: args.max_reservation_bytes,
    }
}

pub(super) fn request_limits(hard: &HardeningArgs) -> RequestLimits {
    RequestLimits {
        max_request_bytes: hard.max_request_bytes,
        max_descriptors: hard.max_descriptors,
        max_entries: hard.max_entries,
        max_key_bytes: hard.max_key_bytes,
        max_value_bytes: hard.max_value_bytes,
        max_domain_bytes: hard.max_domain_bytes,
    }
}

/// The Rate Limit Quota Service's bounds; a bucket id is held to the sizes of a descriptor.
pub(super) fn rlqs_options(args: &RlqsArgs, hard: &HardeningArgs) -> RlqsOptions {
    RlqsOptions {
        assignment_ttl: args.rlqs_assignment_ttl,
        max_streams: args.rlqs_max_streams,
        max_buckets_per_stream: args.rlqs_max_buckets_per_stream,
        max_report_bytes: args.rlqs_max_report_bytes,
        max_bytes_per_stream: args.rlqs_max_bytes_per_stream,
        max_bytes: args.rlqs_max_bytes,
        limits: request_limits(hard),
    }
}

/// The gRPC TLS files, polled until the server stops; `None` without `--grpc-tls-*`.
pub(super) fn grpc_tls(
    hard: &HardeningArgs,
    stop: &watch::Receiver<bool>,
) -> Result<Option<Arc<ReloadingTls>>, TlsError> {
    let (Some(cert), Some(key)) = (&hard.tls.grpc_tls_cert, &hard.tls.grpc_tls_key) else {
        return Ok(None);
    };
    let tls = ReloadingTls::load(TlsFiles {
        cert: cert.clone(),
        key: key.clone(),
        client_ca: hard.tls.grpc_tls_client_ca.clone(),
        allowed_sans: hard.tls.grpc_tls_allowed_san.clone(),
    })?;
    tasks::spawn_tls_poller(tls.clone(), hard.tls.grpc_tls_reload_interval, stop.clone());
    Ok(Some(tls))
}

/// The xDS config source's options, when `--config-xds` names a control plane.
pub(super) fn xds_options(x: &XdsArgs) -> anyhow::Result<Option<XdsOptions>> {
    let Some(server) = &x.config_xds else {
        return Ok(None);
    };
    let tls = if x.xds_tls || server.starts_with("https://") {
        let ca = x.xds_tls_ca.clone().ok_or_else(|| {
            anyhow::anyhow!(
                "xDS over TLS needs the CA of the control plane: --xds-tls-ca (CONFIG_GRPC_XDS_SERVER_TLS_CACERT)"
            )
        })?;
        Some(XdsTls {
            ca,
            identity: x.xds_tls_cert.clone().zip(x.xds_tls_key.clone()),
            server_name: x.xds_tls_server_name.clone(),
        })
    } else {
        None
    };
    for (k, v) in &x.xds_headers {
        let key = tonic::metadata::MetadataKey::<tonic::metadata::Ascii>::from_bytes(k.as_bytes());
        let value = tonic::metadata::MetadataValue::<tonic::metadata::Ascii>::try_from(v.as_str());
        if key.is_err() || value.is_err() {
            anyhow::bail!("--xds-headers: {k}={v} is not a valid gRPC header");
        }
    }
    Ok(Some(XdsOptions {
        server: server.clone(),
        node_id: x.xds_node_id.clone(),
        node_metadata: x.xds_node_metadata.clone(),
        headers: x.xds_headers.clone(),
        tls,
        max_message_bytes: x.xds_max_message_bytes,
        connect_timeout: x.xds_connect_timeout,
        backoff_initial: x.xds_backoff_initial,
        backoff_max: x.xds_backoff_max,
    }))
}

/// The gRPC port's bounds from the hardening flags.
pub(super) fn grpc_limits(h: &HardeningArgs) -> GrpcLimits {
    GrpcLimits {
        request_read_timeout: h.grpc_request_read_timeout,
        max_concurrent_streams: h.grpc_max_concurrent_streams,
        keepalive_interval: h.grpc_keepalive_interval,
        keepalive_timeout: h.grpc_keepalive_timeout,
        max_connection_age: h.grpc_max_connection_age,
        max_connection_age_grace: h.grpc_max_connection_age_grace,
        max_connections: h.grpc_max_connections,
        idle_timeout: h.grpc_idle_timeout,
        preface_timeout: h.grpc_preface_timeout,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{Cli, Command};
    use clap::Parser;

    /// Which headers a command line turns on: (draft 03, draft 10), or a usage error.
    type Headers = Result<(bool, bool), ()>;

    #[test]
    fn response_header_formats() {
        let cases: [(&[&str], Headers); 7] = [
            (&[], Ok((false, false))),
            (&["--response-headers"], Ok((true, false))),
            (&["--response-headers-format", "legacy"], Ok((true, false))),
            (&["--response-headers-format", "ietf"], Ok((false, true))),
            (&["--response-headers-format=both"], Ok((true, true))),
            (
                &["--response-headers", "--response-headers-format", "ietf"],
                Ok((false, true)),
            ),
            (&["--response-headers-format", "draft-10"], Err(())),
        ];
        for (flags, want) in cases {
            let mut argv = vec!["sluice", "serve", "--config", "c"];
            argv.extend(flags);
            let got = match Cli::try_parse_from(&argv) {
                Ok(Cli {
                    command: Command::Serve(args),
                }) => {
                    let o = limiter_options(&args);
                    Ok((o.response_headers.is_some(), o.ietf_headers))
                }
                Ok(_) => unreachable!("a serve command line"),
                Err(e) => {
                    assert!(
                        e.to_string()
                            .contains("[possible values: legacy, ietf, both]"),
                        "{e}"
                    );
                    Err(())
                }
            };
            assert_eq!(got, want, "{flags:?}");
        }
    }

    /// The xDS options of `serve` with `flags`, or the start-up error.
    fn xds(flags: &[&str]) -> Result<Option<XdsOptions>, String> {
        let mut argv = vec!["sluice", "serve"];
        argv.extend(flags);
        let Command::Serve(args) = Cli::try_parse_from(&argv).expect("flags").command else {
            unreachable!("serve")
        };
        xds_options(&args.xds).map_err(|e| e.to_string())
    }

    #[test]
    fn xds_options_from_flags() {
        assert!(xds(&["--config", "c"]).unwrap().is_none());
        let plain = xds(&["--config-xds", "cp:18000"]).unwrap().unwrap();
        assert!(plain.tls.is_none());
        assert_eq!(plain.max_message_bytes, 16 << 20);
        for tls in [
            &["--config-xds", "cp:18001", "--xds-tls", "true"][..],
            &["--config-xds", "https://cp:18001"],
        ] {
            assert!(xds(tls).unwrap_err().contains("--xds-tls-ca"), "{tls:?}");
        }
        let mtls = xds(&[
            "--config-xds=https://cp:18001",
            "--xds-tls-ca=ca.crt",
            "--xds-tls-cert=tls.crt",
            "--xds-tls-key=tls.key",
        ])
        .unwrap()
        .unwrap();
        let tls = mtls.tls.expect("TLS from the https URL");
        assert_eq!(tls.identity.map(|(c, _)| c), Some("tls.crt".into()));
        let bad = xds(&["--config-xds", "cp:1", "--xds-headers", "x-a=b\nc"]);
        assert!(bad.unwrap_err().contains("not a valid gRPC header"));
    }
}
