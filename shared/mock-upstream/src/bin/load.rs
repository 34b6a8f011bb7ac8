//! `switchyard-load`: placeholder until the load generator lands.
fn main() {}
