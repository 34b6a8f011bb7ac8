//! End-to-end tests across real processes live in `tests/`; `src/bin/e2e-data-plane.rs` and
//! `src/bin/e2e-control-plane.rs` are the data plane's and the control plane's entry points built
//! inside this crate so the tests can start them.
