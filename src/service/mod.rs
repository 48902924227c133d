//! The network faces of sluice: the Envoy RLS and RLQS gRPC services, gRPC health, and the
//! HTTP side port (with the admin API). Thin: they convert between wire formats and the model and hold
//! no policy.

pub(crate) mod accept;
pub mod code_name;
pub(crate) mod convert;
pub(crate) mod every_call;
pub(crate) mod grpc;
pub(crate) mod http_gate;
pub(crate) mod http_routes;
pub(crate) mod http_server;
pub(crate) mod json_route;
pub(crate) mod limits;
pub(crate) mod load_report;
pub(crate) mod native;
pub(crate) mod overload;
pub(crate) mod pipeline;
pub(crate) mod preface;
pub(crate) mod propagation;
pub mod rlqs;
pub(crate) mod rls;
pub(crate) mod rls_json;
pub(crate) mod state;
pub(crate) mod tls;

pub use state::ServiceState;
