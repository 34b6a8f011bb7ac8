//! Placeholder; filled by a later issue.
fn main() {}
