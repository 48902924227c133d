//! The network faces of sluice: the Envoy RLS gRPC service, gRPC health, and the HTTP side
//! port. Thin: they convert between wire formats and the model and hold no policy.

pub mod convert;
pub mod http;
pub mod limits;
pub mod overload;
pub mod rls;
pub mod state;
pub mod tls;

pub use state::ServiceState;
