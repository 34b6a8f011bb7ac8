//! Checking a JSON Web Token from the provider: an ID token at sign-in, or a bearer token an
//! automation presents. Pure: the keys and `now` are arguments.
//!
//! Only RS256 and ES256 (P-256) signatures are accepted, each with a key of its own kind: a token
//! saying `none`, an HMAC algorithm (which would make the public key a shared secret) or an
//! algorithm its key was not published for is refused before any signature is looked at. The
//! claims are then checked by hand, so every rule is here: `iss` exactly the issuer; `aud` one of
//! the accepted audiences (and, with several audiences, `azp` the client); `exp`, `nbf` and `iat`
//! within [`CLOCK_SKEW_SECS`] of `now`; a non-empty `sub`; and at sign-in the `nonce` sent.

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, JwkSet, KeyAlgorithm};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

use super::settings::CLOCK_SKEW_SECS;

/// What a token must say to be accepted.
#[derive(Debug, Clone, Copy)]
pub struct Expect<'a> {
    pub issuer: &'a str,
    /// `aud` must name one of these.
    pub audiences: &'a [String],
    /// The client id: the `azp` a token for several audiences must carry.
    pub client_id: &'a str,
    /// The `nonce` sent with the sign-in (ID tokens); `None` for bearer tokens.
    pub nonce: Option<&'a str>,
}

/// Why a token was refused: the message says which rule, never the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the token is not a well-formed JWT")]
    Malformed,
    #[error("the token is signed with {0}; only RS256 and ES256 are accepted")]
    Algorithm(String),
    #[error("the token names a signing key the issuer does not publish")]
    UnknownKey,
    #[error("the token's signature does not verify")]
    Signature,
    #[error("the token's issuer is not the configured issuer")]
    Issuer,
    #[error("the token is not meant for this control plane (audience)")]
    Audience,
    #[error("the token has expired")]
    Expired,
    #[error("the token is not valid yet")]
    NotYetValid,
    #[error("the token is issued in the future")]
    IssuedInFuture,
    #[error("the token's nonce is not the one this sign-in sent")]
    Nonce,
    #[error("the token has no {0} claim")]
    Missing(&'static str),
}

/// The header's algorithm and key id, refusing every algorithm but RS256 and ES256.
pub fn header(token: &str) -> Result<(Algorithm, Option<String>), Refusal> {
    // `none` (and anything else unknown) does not even parse as an algorithm.
    let header = jsonwebtoken::decode_header(token).map_err(|_| Refusal::Malformed)?;
    match header.alg {
        Algorithm::RS256 | Algorithm::ES256 => Ok((header.alg, header.kid)),
        other => Err(Refusal::Algorithm(format!("{other:?}"))),
    }
}

/// The key of `keys` that may check a token signed with `alg` by key `kid`: the one with that id
/// (or, without an id, the only key of the algorithm's kind), of the algorithm's kind and, when it
/// says, published for that algorithm.
fn key_for<'k>(keys: &'k JwkSet, alg: Algorithm, kid: Option<&str>) -> Result<&'k Jwk, Refusal> {
    let fits = |jwk: &Jwk| {
        let kind = match (&jwk.algorithm, alg) {
            (AlgorithmParameters::RSA(_), Algorithm::RS256) => true,
            (AlgorithmParameters::EllipticCurve(ec), Algorithm::ES256) => {
                ec.curve == EllipticCurve::P256
            }
            _ => false,
        };
        let declared = matches!(
            (jwk.common.key_algorithm, alg),
            (None, _)
                | (Some(KeyAlgorithm::RS256), Algorithm::RS256)
                | (Some(KeyAlgorithm::ES256), Algorithm::ES256)
        );
        kind && declared
    };
    match kid {
        Some(kid) => keys
            .keys
            .iter()
            .find(|k| k.common.key_id.as_deref() == Some(kid))
            .ok_or(Refusal::UnknownKey)
            .and_then(|k| {
                if fits(k) {
                    Ok(k)
                } else {
                    Err(Refusal::Algorithm(format!(
                        "{alg:?} with a key not made for it"
                    )))
                }
            }),
        None => {
            let mut fitting = keys.keys.iter().filter(|k| fits(k));
            match (fitting.next(), fitting.next()) {
                (Some(only), None) => Ok(only),
                _ => Err(Refusal::UnknownKey),
            }
        }
    }
}

/// The token's claims once its signature (by one of `keys`) and every claim rule hold.
pub fn verify(
    token: &str,
    keys: &JwkSet,
    expect: &Expect<'_>,
    now: i64,
) -> Result<Map<String, Value>, Refusal> {
    let (alg, kid) = header(token)?;
    let jwk = key_for(keys, alg, kid.as_deref())?;
    let key = DecodingKey::from_jwk(jwk).map_err(|_| Refusal::UnknownKey)?;
    let mut validation = Validation::new(alg);
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    validation.required_spec_claims.clear();
    let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &validation).map_err(
        |e| match e.kind() {
            jsonwebtoken::errors::ErrorKind::InvalidSignature => Refusal::Signature,
            jsonwebtoken::errors::ErrorKind::InvalidAlgorithm => {
                Refusal::Algorithm(format!("{alg:?} with a key not made for it"))
            }
            _ => Refusal::Malformed,
        },
    )?;
    check_claims(&data.claims, expect, now)?;
    Ok(data.claims)
}

/// The claim rules (the signature already checked).
fn check_claims(claims: &Map<String, Value>, expect: &Expect<'_>, now: i64) -> Result<(), Refusal> {
    let text = |name: &str| claims.get(name).and_then(Value::as_str);
    let time = |name: &'static str| {
        claims
            .get(name)
            .and_then(Value::as_f64)
            .map(|t| t as i64)
            .ok_or(Refusal::Missing(name))
    };
    if text("iss").ok_or(Refusal::Missing("iss"))? != expect.issuer {
        return Err(Refusal::Issuer);
    }
    let audiences: Vec<&str> = match claims.get("aud") {
        Some(Value::String(one)) => vec![one.as_str()],
        Some(Value::Array(many)) => many.iter().filter_map(Value::as_str).collect(),
        _ => return Err(Refusal::Missing("aud")),
    };
    if !audiences
        .iter()
        .any(|a| expect.audiences.iter().any(|e| e == a))
    {
        return Err(Refusal::Audience);
    }
    if audiences.len() > 1 && text("azp") != Some(expect.client_id) {
        return Err(Refusal::Audience);
    }
    if now >= time("exp")?.saturating_add(CLOCK_SKEW_SECS) {
        return Err(Refusal::Expired);
    }
    if claims.contains_key("nbf") && time("nbf")? > now.saturating_add(CLOCK_SKEW_SECS) {
        return Err(Refusal::NotYetValid);
    }
    if time("iat")? > now.saturating_add(CLOCK_SKEW_SECS) {
        return Err(Refusal::IssuedInFuture);
    }
    if text("sub").is_none_or(str::is_empty) {
        return Err(Refusal::Missing("sub"));
    }
    if let Some(nonce) = expect.nonce {
        if text("nonce") != Some(nonce) {
            return Err(Refusal::Nonce);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::json;

    const ISSUER: &str = "https://login.example.com";
    const NOW: i64 = 1_800_000_000;

    /// A P-256 key: its signing key and its JWK (id `kid`).
    fn ec_key(kid: &str) -> (EncodingKey, Jwk, Vec<u8>) {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let raw = pair.public_key_raw().to_vec(); // 0x04 || x || y
        let jwk: Jwk = serde_json::from_value(json!({
            "kty": "EC", "crv": "P-256", "kid": kid, "alg": "ES256", "use": "sig",
            "x": URL_SAFE_NO_PAD.encode(&raw[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&raw[33..65]),
        }))
        .unwrap();
        let signing = EncodingKey::from_ec_der(&pair.serialize_der());
        (signing, jwk, raw)
    }

    fn claims() -> Value {
        json!({
            "iss": ISSUER, "aud": "switchyard", "sub": "u-1", "email": "a@example.com",
            "iat": NOW - 10, "exp": NOW + 300, "nonce": "n-1"
        })
    }

    fn sign(key: &EncodingKey, kid: &str, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(kid.into());
        jsonwebtoken::encode(&header, claims, key).unwrap()
    }

    fn check(token: &str, keys: &JwkSet, now: i64) -> Result<Map<String, Value>, Refusal> {
        let audiences = vec!["switchyard".to_owned()];
        let expect = Expect {
            issuer: ISSUER,
            audiences: &audiences,
            client_id: "switchyard",
            nonce: Some("n-1"),
        };
        verify(token, keys, &expect, now)
    }

    fn edited(edit: impl FnOnce(&mut Map<String, Value>)) -> Value {
        let mut value = claims();
        edit(value.as_object_mut().unwrap());
        value
    }

    #[test]
    fn a_good_token_passes_and_each_broken_rule_is_named() {
        let (key, jwk, _) = ec_key("k1");
        let keys = JwkSet { keys: vec![jwk] };
        let good = sign(&key, "k1", &claims());
        assert_eq!(check(&good, &keys, NOW).unwrap()["sub"], "u-1");
        let cases: Vec<(Value, Refusal)> = vec![
            (
                edited(|c| {
                    c.insert("iss".into(), json!("https://evil.example.com"));
                }),
                Refusal::Issuer,
            ),
            (
                edited(|c| {
                    c.insert("aud".into(), json!("other-app"));
                }),
                Refusal::Audience,
            ),
            (
                edited(|c| {
                    c.insert("aud".into(), json!(["switchyard", "other"]));
                }),
                Refusal::Audience,
            ),
            (
                edited(|c| {
                    c.insert("exp".into(), json!(NOW - 61));
                }),
                Refusal::Expired,
            ),
            (
                edited(|c| {
                    c.insert("nbf".into(), json!(NOW + 61));
                }),
                Refusal::NotYetValid,
            ),
            (
                edited(|c| {
                    c.insert("iat".into(), json!(NOW + 61));
                }),
                Refusal::IssuedInFuture,
            ),
            (
                edited(|c| {
                    c.insert("nonce".into(), json!("n-2"));
                }),
                Refusal::Nonce,
            ),
            (
                edited(|c| {
                    c.remove("nonce");
                }),
                Refusal::Nonce,
            ),
            (
                edited(|c| {
                    c.remove("exp");
                }),
                Refusal::Missing("exp"),
            ),
            (
                edited(|c| {
                    c.remove("iat");
                }),
                Refusal::Missing("iat"),
            ),
            (
                edited(|c| {
                    c.remove("sub");
                }),
                Refusal::Missing("sub"),
            ),
            (
                edited(|c| {
                    c.remove("aud");
                }),
                Refusal::Missing("aud"),
            ),
        ];
        for (claims, refusal) in cases {
            let token = sign(&key, "k1", &claims);
            assert_eq!(check(&token, &keys, NOW), Err(refusal), "{claims}");
        }
        // Several audiences are fine when the client is the authorized party.
        let azp = edited(|c| {
            c.insert("aud".into(), json!(["other", "switchyard"]));
            c.insert("azp".into(), json!("switchyard"));
        });
        assert!(check(&sign(&key, "k1", &azp), &keys, NOW).is_ok());
    }

    #[test]
    fn clock_skew_is_sixty_seconds_either_way() {
        let (key, jwk, _) = ec_key("k1");
        let keys = JwkSet { keys: vec![jwk] };
        let token = sign(&key, "k1", &claims());
        // exp = NOW + 300: accepted until 59 s after it.
        assert!(check(&token, &keys, NOW + 359).is_ok());
        assert_eq!(check(&token, &keys, NOW + 360), Err(Refusal::Expired));
        let early = edited(|c| {
            c.insert("nbf".into(), json!(NOW + 60));
            c.insert("iat".into(), json!(NOW + 60));
        });
        assert!(check(&sign(&key, "k1", &early), &keys, NOW).is_ok());
    }

    #[test]
    fn a_tampered_payload_or_another_key_fails_the_signature() {
        let (key, jwk, _) = ec_key("k1");
        let keys = JwkSet { keys: vec![jwk] };
        let token = sign(&key, "k1", &claims());
        let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
        let forged = edited(|c| {
            c.insert("sub".into(), json!("admin"));
        });
        parts[1] = URL_SAFE_NO_PAD.encode(forged.to_string());
        assert_eq!(check(&parts.join("."), &keys, NOW), Err(Refusal::Signature));
        let (other, _, _) = ec_key("k1");
        assert_eq!(
            check(&sign(&other, "k1", &claims()), &keys, NOW),
            Err(Refusal::Signature)
        );
        assert_eq!(
            check(&sign(&key, "k2", &claims()), &keys, NOW),
            Err(Refusal::UnknownKey)
        );
    }

    #[test]
    fn none_and_hmac_with_the_public_key_are_refused() {
        let (_, jwk, raw) = ec_key("k1");
        let keys = JwkSet { keys: vec![jwk] };
        let body = URL_SAFE_NO_PAD.encode(claims().to_string());
        let none = format!(
            "{}.{body}.",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"none","kid":"k1"}"#)
        );
        assert_eq!(check(&none, &keys, NOW), Err(Refusal::Malformed));
        // HS256 keyed with the public key's bytes: what a confused verifier would accept.
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("k1".into());
        let hs = jsonwebtoken::encode(&header, &claims(), &EncodingKey::from_secret(&raw)).unwrap();
        assert!(matches!(check(&hs, &keys, NOW), Err(Refusal::Algorithm(_))));
        // RS256 claimed over an EC key.
        let rs = format!(
            "{}.{body}.AAAA",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"RS256","kid":"k1"}"#)
        );
        assert!(matches!(check(&rs, &keys, NOW), Err(Refusal::Algorithm(_))));
        assert_eq!(check("not-a-jwt", &keys, NOW), Err(Refusal::Malformed));
    }
}
