//! The signature every delivery carries, `x-switchyard-signature: t=<unix seconds>,v1=<hex>`:
//! HMAC-SHA256 keyed with the webhook's secret over `<t>.<body>` (the timestamp, a dot, the
//! exact body bytes). A receiver recomputes it over the body it got, compares in constant
//! time, and refuses a timestamp too far from its own clock (a replay).

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header a delivery is signed in.
pub const SIGNATURE_HEADER: &str = "x-switchyard-signature";

/// The hex HMAC-SHA256 of `<unix_s>.<body>` under `secret`.
pub fn mac_hex(secret: &[u8], unix_s: u64, body: &[u8]) -> String {
    // HMAC takes a key of any length.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
    mac.update(unix_s.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The header's value: `t=<unix_s>,v1=<hex>`.
pub fn signature(secret: &[u8], unix_s: u64, body: &[u8]) -> String {
    format!("t={unix_s},v1={}", mac_hex(secret, unix_s, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_hmac_sha256_over_timestamp_dot_body() {
        // Python: hmac.new(b"Jefe", b'1700000000.{"a":1}', hashlib.sha256).hexdigest()
        let want = "fa5f6481efc59da48b19c9dc10196c9953e5651f8304b3a318b6b87d70272e0a";
        assert_eq!(mac_hex(b"Jefe", 1_700_000_000, b"{\"a\":1}"), want);
        assert_eq!(
            signature(b"Jefe", 1_700_000_000, b"{\"a\":1}"),
            format!("t=1700000000,v1={want}")
        );
        assert_ne!(mac_hex(b"Jefe", 0, b"x"), mac_hex(b"Jefe", 1, b"x"));
        assert_ne!(mac_hex(b"Jefe", 0, b"x"), mac_hex(b"Jeff", 0, b"x"));
    }
}
