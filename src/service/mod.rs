//! The network faces of sluice: the Envoy RLS and RLQS gRPC services, gRPC health, and the
//! HTTP side port (with the admin API). Thin: they convert between wire formats and the model and hold
//! no policy.

pub mod accept;
pub mod code_name;
pub mod convert;
pub mod every_call;
pub mod grpc;
pub mod http_gate;
pub mod http_routes;
pub mod http_server;
pub mod json_route;
pub mod limits;
pub mod load_report;
pub mod native;
pub mod overload;
pub mod pipeline;
pub mod preface;
pub mod propagation;
pub mod rlqs;
pub mod rls;
pub mod rls_json;
pub mod state;
pub mod tls;

pub use state::ServiceState;
