//! The soft open-file limit (`RLIMIT_NOFILE`) raised at start-up to what the connection caps
//! need: every connection is a descriptor, and a soft limit of 1,024 (a common default) would
//! make the default 4,096 gRPC + 1,024 HTTP connections unreachable, with descriptor exhaustion
//! coming first. Raised up to the hard limit only; below what the caps need, a warning names
//! both numbers.

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

use crate::service::http_server::HEALTH_RESERVE;
use crate::settings::ServeArgs;

/// Descriptors beyond the connections: listeners, Redis connections, the config watcher,
/// log and metric exporters, files read at reload.
pub(crate) const MARGIN: u64 = 256;

/// Descriptors the connection caps of `args` need, with [`MARGIN`].
pub(crate) fn needed(args: &ServeArgs) -> u64 {
    let h = &args.hardening;
    let prometheus = args.prometheus_addr.map_or(0, |_| h.http_max_connections);
    [
        h.grpc_max_connections,
        h.http_max_connections,
        HEALTH_RESERVE,
        prometheus,
    ]
    .iter()
    .map(|&n| n as u64)
    .fold(MARGIN, u64::saturating_add)
}

/// Raises the soft limit towards [`needed`]; warns if the hard limit stops it short.
pub(crate) fn raise(args: &ServeArgs) {
    let need = needed(args);
    let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
    // `None` is unlimited.
    let soft = current.unwrap_or(u64::MAX);
    if soft >= need {
        return;
    }
    let target = maximum.map_or(need, |hard| hard.min(need));
    let raised = target > soft
        && setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(target),
                maximum,
            },
        )
        .is_ok();
    let now = if raised { target } else { soft };
    if raised {
        tracing::info!(from = soft, to = now, "raised the soft open-file limit");
    }
    if now < need {
        tracing::warn!(
            limit = now,
            needed = need,
            grpc_max_connections = args.hardening.grpc_max_connections,
            http_max_connections = args.hardening.http_max_connections,
            "the open-file limit ({now}) is below what the connection caps need ({need}: \
             --grpc-max-connections + --http-max-connections + {MARGIN}); descriptors run out \
             before the caps are reached: raise the hard limit (ulimit -Hn) or lower the caps"
        );
    }
}
