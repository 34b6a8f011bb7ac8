//! Streams.
pub struct StreamTranslator;
pub struct UsageScanner;
