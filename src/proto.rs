//! Code generated from `proto/`: Envoy RLS v3 and RLQS v3 (wire-compatible; RLS entry key/value
//! as bytes), sluice's own `sluice.v1` (the native API, [`sluice::v1`]), and the xDS config
//! source's ADS (`envoy.service.discovery.v3`) and `RateLimitConfig` ([`ratelimit`]).

#[allow(clippy::all, missing_docs)]
pub mod envoy {
    pub mod config {
        pub mod core {
            pub mod v3 {
                tonic::include_proto!("envoy.config.core.v3");
            }
        }
    }
    pub mod extensions {
        pub mod common {
            pub mod ratelimit {
                pub mod v3 {
                    tonic::include_proto!("envoy.extensions.common.ratelimit.v3");
                }
            }
        }
    }
    pub mod service {
        pub mod ratelimit {
            pub mod v3 {
                tonic::include_proto!("envoy.service.ratelimit.v3");
            }
        }
        pub mod rate_limit_quota {
            pub mod v3 {
                tonic::include_proto!("envoy.service.rate_limit_quota.v3");
            }
        }
        pub mod discovery {
            pub mod v3 {
                tonic::include_proto!("envoy.service.discovery.v3");
            }
        }
    }
    pub mod r#type {
        pub mod v3 {
            tonic::include_proto!("envoy.r#type.v3");
        }
    }
}

/// envoyproxy/ratelimit's `RateLimitConfig`: the resource the xDS config source receives.
#[allow(clippy::all, missing_docs)]
pub mod ratelimit {
    pub mod config {
        pub mod ratelimit {
            pub mod v3 {
                tonic::include_proto!("ratelimit.config.ratelimit.v3");
            }
        }
    }
}

/// `google.rpc.Status`, the `error_detail` of an xDS NACK.
#[allow(clippy::all, missing_docs)]
pub mod google {
    pub mod rpc {
        tonic::include_proto!("google.rpc");
    }
}

#[allow(clippy::all, missing_docs)]
pub mod sluice {
    pub mod v1 {
        tonic::include_proto!("sluice.v1");
    }
}

pub use envoy::extensions::common::ratelimit::v3::{rate_limit_descriptor, RateLimitDescriptor};
pub use envoy::service::ratelimit::v3::{
    rate_limit_response, rate_limit_service_client, rate_limit_service_server, RateLimitRequest,
    RateLimitResponse,
};

pub use envoy::service::rate_limit_quota::v3 as rlqs;

/// Encoded `FileDescriptorSet` of every proto above, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/rls_descriptor.bin"));

pub use envoy::service::discovery::v3 as discovery;
pub use ratelimit::config::ratelimit::v3 as rls_conf;

/// The codec of every generated service (`build.rs` names it): prost's wire format, with each
/// message encoded into one `Vec` and copied into tonic's buffer once. prost writes a message
/// byte by byte (each varint, each tag) through `BufMut`, and tonic's buffer takes each byte
/// through a capacity check and a `memcpy` call: measured on RLQS answers (a few hundred
/// bucket actions each), a third of the server's instructions, two thirds of them that
/// per-byte path (bench/why.md, "RLQS").
///
/// RLQS streams' buffers start small (`RLQS_BUFFER`, 512 bytes).
pub(crate) mod codec {
    use std::any::TypeId;
    use std::marker::PhantomData;

    use bytes::BufMut;
    use prost::Message;
    use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
    use tonic::Status;
    use tonic_prost::{ProstCodec, ProstDecoder};

    use super::rlqs::{RateLimitQuotaResponse, RateLimitQuotaUsageReports};

    /// The size an RLQS stream's decode and encode buffers start at. tonic keeps one of each
    /// per stream for as long as it lasts, grown to the largest message (they never shrink),
    /// and starts them at 8 KiB: 16 KiB of a stream of one bucket's 18 KB. RLQS messages are
    /// read and written whole, so a small start only costs a regrowth on the first large one.
    const RLQS_BUFFER: usize = 512;
    /// tonic's default: encoded messages are handed to HTTP/2 once this many bytes are waiting.
    const YIELD_THRESHOLD: usize = 32 * 1024;

    /// The buffers of a call that encodes or decodes `M`.
    fn buffer_settings<M: 'static>() -> BufferSettings {
        let m = TypeId::of::<M>();
        if m == TypeId::of::<RateLimitQuotaResponse>()
            || m == TypeId::of::<RateLimitQuotaUsageReports>()
        {
            BufferSettings::new(RLQS_BUFFER, YIELD_THRESHOLD)
        } else {
            BufferSettings::default()
        }
    }

    /// prost's codec with [`FlatEncoder`].
    #[derive(Debug)]
    pub(crate) struct FlatCodec<T, U>(PhantomData<(T, U)>);

    impl<T, U> Default for FlatCodec<T, U> {
        fn default() -> Self {
            FlatCodec(PhantomData)
        }
    }

    impl<T, U> Codec for FlatCodec<T, U>
    where
        T: Message + Send + 'static,
        U: Message + Default + Send + 'static,
    {
        type Encode = T;
        type Decode = U;
        type Encoder = FlatEncoder<T>;
        type Decoder = FlatDecoder<U>;

        fn encoder(&mut self) -> Self::Encoder {
            FlatEncoder(PhantomData)
        }

        fn decoder(&mut self) -> Self::Decoder {
            FlatDecoder(ProstCodec::<T, U>::default().decoder())
        }
    }

    /// prost's decoder, with [`buffer_settings`].
    #[derive(Debug)]
    pub(crate) struct FlatDecoder<U>(ProstDecoder<U>);

    impl<U: Message + Default + 'static> Decoder for FlatDecoder<U> {
        type Item = U;
        type Error = Status;

        fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
            self.0.decode(buf)
        }

        fn buffer_settings(&self) -> BufferSettings {
            buffer_settings::<U>()
        }
    }

    /// Encodes a message into a `Vec` of its exact length, then into tonic's buffer in one copy.
    #[derive(Debug)]
    pub(crate) struct FlatEncoder<T>(PhantomData<T>);

    impl<T: Message + 'static> Encoder for FlatEncoder<T> {
        type Item = T;
        type Error = Status;

        fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
            buf.put_slice(&item.encode_to_vec());
            Ok(())
        }

        fn buffer_settings(&self) -> BufferSettings {
            buffer_settings::<T>()
        }
    }
}
