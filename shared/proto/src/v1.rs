//! The generated protobuf messages and gRPC stubs of `switchyard.snapshot.v1` (a bottom module:
//! every other module of the crate reads them).

tonic::include_proto!("switchyard.snapshot.v1");
