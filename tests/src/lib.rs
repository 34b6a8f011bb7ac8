//! End-to-end tests across real processes live in `tests/`; `src/bin/e2e-data-plane.rs` is the
//! data plane's entry point built inside this crate so the tests can start it.
