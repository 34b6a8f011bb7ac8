//! The exact response cache, purely: what a request's key is and whether it can be cached
//! (`key.rs`, over the body read once by `canonical.rs`), and an answer's canonical form and its replay (`answer.rs`). The request phase
//! that reads and fills the cache is `phases::cache`; the stores are `switchyard_state::cache`.

pub mod answer;
pub mod canonical;
pub mod key;
pub mod semantic;
