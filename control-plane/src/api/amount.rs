//! Amounts a client may send as a JSON number or as a string (prices and spend limits in USD,
//! limit values), kept as their decimal text so they are parsed exactly: `2.5` and `"2.50"` both
//! give 2 500 000 micro-USD, never a binary float's approximation of them.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use switchyard_engine::limit::parse_usd_micros;
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

use crate::error::{ApiError, ApiResult};

/// The decimal text of a JSON number or string, as sent.
///
/// A JSON number reaches serde as an integer or an `f64`; an `f64` is written back as the
/// shortest decimal that reads as the same `f64` (`2.5`, `0.075`, `0.000001`), which is the
/// figure the client typed whenever it has at most 15 significant digits, and never in exponent
/// form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecimalText(pub String);

impl<'de> Deserialize<'de> for DecimalText {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<DecimalText, D::Error> {
        struct Text;

        impl Visitor<'_> for Text {
            type Value = DecimalText;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a decimal number, as a JSON number or a string")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<DecimalText, E> {
                Ok(DecimalText(v.to_owned()))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<DecimalText, E> {
                Ok(DecimalText(v.to_string()))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<DecimalText, E> {
                Ok(DecimalText(v.to_string()))
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<DecimalText, E> {
                // `{}` of an f64 is its shortest round-trip decimal, without an exponent.
                Ok(DecimalText(format!("{v}")))
            }
        }

        de.deserialize_any(Text)
    }
}

impl Serialize for DecimalText {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl DecimalText {
    /// USD → micro-USD (at most six decimals, 0 to 10⁹ USD); a 422 naming `field` otherwise.
    pub fn usd_micros(&self, field: &str) -> ApiResult<u64> {
        parse_usd_micros(&self.0).map_err(|message| ApiError::validation(field, message))
    }

    /// A whole number (digits only, or a JSON integer); a 422 naming `field` otherwise.
    pub fn whole(&self, field: &str) -> ApiResult<u64> {
        let text = self.0.trim();
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ApiError::validation(
                field,
                format!(
                    "{field} must be a whole number, got `{}`",
                    crate::error::bounded(text, 64)
                ),
            ));
        }
        text.parse::<u64>().map_err(|_| {
            ApiError::validation(
                field,
                format!(
                    "{field} is too large: `{}`",
                    crate::error::bounded(text, 64)
                ),
            )
        })
    }
}

fn one_of(description: &str, integer_only: bool) -> RefOr<Schema> {
    let number = if integer_only {
        Type::Integer
    } else {
        Type::Number
    };
    RefOr::T(Schema::OneOf(
        OneOfBuilder::new()
            .item(ObjectBuilder::new().schema_type(SchemaType::Type(Type::String)))
            .item(ObjectBuilder::new().schema_type(SchemaType::Type(number)))
            .description(Some(description))
            .build(),
    ))
}

/// Schema only: a USD figure in a request body.
pub struct UsdAmount;

impl PartialSchema for UsdAmount {
    fn schema() -> RefOr<Schema> {
        one_of(
            "USD as a decimal string (`\"2.50\"`) or a JSON number (`2.5`): at most 6 \
             decimals, 0 to 1000000000. Stored exactly, in micro-USD.",
            false,
        )
    }
}

impl ToSchema for UsdAmount {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("UsdAmount")
    }
}

/// Schema only: a limit's value in a request body.
pub struct LimitValueInput;

impl PartialSchema for LimitValueInput {
    fn schema() -> RefOr<Schema> {
        RefOr::T(Schema::OneOf(
            OneOfBuilder::new()
                .item(ObjectBuilder::new().schema_type(SchemaType::Type(Type::Integer)))
                .item(ObjectBuilder::new().schema_type(SchemaType::Type(Type::String)))
                .item(ObjectBuilder::new().schema_type(SchemaType::Type(Type::Number)))
                .description(Some(
                    "A whole number of requests, tokens or concurrent requests (1 to \
                     1000000000000000); for `spend`, USD as a decimal string or a JSON number \
                     (at most 6 decimals, above 0, at most 1000000000).",
                ))
                .build(),
        ))
    }
}

impl ToSchema for LimitValueInput {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("LimitValueInput")
    }
}

/// Schema only: a limit's value in a response (a decimal USD string for `spend`, an integer
/// otherwise).
pub struct LimitValueOutput;

impl PartialSchema for LimitValueOutput {
    fn schema() -> RefOr<Schema> {
        one_of(
            "For `spend`, USD as an exact decimal string; otherwise a whole number of \
             requests, tokens or concurrent requests.",
            true,
        )
    }
}

impl ToSchema for LimitValueOutput {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("LimitValueOutput")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn micros(json: &str) -> ApiResult<u64> {
        serde_json::from_str::<DecimalText>(json)
            .unwrap()
            .usd_micros("x")
    }

    #[test]
    fn numbers_and_strings_parse_exactly() {
        assert_eq!(micros("2.5").unwrap(), 2_500_000);
        assert_eq!(micros("\"2.50\"").unwrap(), 2_500_000);
        assert_eq!(micros("0.075").unwrap(), 75_000);
        assert_eq!(micros("0.1").unwrap(), 100_000);
        assert_eq!(micros("0.000001").unwrap(), 1);
        assert_eq!(micros("1e-6").unwrap(), 1);
        assert_eq!(micros("15").unwrap(), 15_000_000);
        assert_eq!(micros("1000000000").unwrap(), 1_000_000_000_000_000);
        for bad in ["-1", "0.0000001", "1e300", "\"abc\"", "1000000001", "\"\""] {
            assert!(micros(bad).is_err(), "{bad}");
        }
        assert!(serde_json::from_str::<DecimalText>("true").is_err());
        assert!(serde_json::from_str::<DecimalText>("null").is_err());
        let whole = |json: &str| {
            serde_json::from_str::<DecimalText>(json)
                .unwrap()
                .whole("value")
        };
        assert_eq!(whole("100").unwrap(), 100);
        assert_eq!(whole("\"100\"").unwrap(), 100);
        assert_eq!(whole("1e3").unwrap(), 1000);
        for bad in ["1.5", "-1", "\"x\"", "99999999999999999999"] {
            assert!(whole(bad).is_err(), "{bad}");
        }
    }
}
