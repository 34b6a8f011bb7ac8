//! JSON Schema ⇄ Gemini `Schema` (the OpenAPI subset with upper-case type names).

use serde_json::{Map, Value};

const GEMINI_KEYS: &[&str] = &[
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "required",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "minProperties",
    "maxProperties",
    "default",
    "example",
    "propertyOrdering",
];

/// A JSON Schema as a Gemini `Schema`, when it only uses what `Schema` can say; None otherwise
/// (the caller then sends it as `parametersJsonSchema` / `responseJsonSchema`).
pub(crate) fn to_gemini_schema(v: &Value) -> Option<Value> {
    let obj = v.as_object()?;
    let mut out = Map::new();
    for (k, val) in obj {
        match k.as_str() {
            "$schema" => {}
            "type" => match val {
                Value::String(t) => {
                    out.insert("type".into(), Value::String(t.to_ascii_uppercase()));
                }
                Value::Array(ts) => {
                    let non_null: Vec<&str> = ts
                        .iter()
                        .filter_map(Value::as_str)
                        .filter(|t| *t != "null")
                        .collect();
                    if non_null.len() != 1 || ts.len() > 2 {
                        return None;
                    }
                    out.insert(
                        "type".into(),
                        Value::String(non_null[0].to_ascii_uppercase()),
                    );
                    if ts.len() == 2 {
                        out.insert("nullable".into(), Value::Bool(true));
                    }
                }
                _ => return None,
            },
            "properties" => {
                let props = val.as_object()?;
                let mut m = Map::new();
                for (name, p) in props {
                    m.insert(name.clone(), to_gemini_schema(p)?);
                }
                out.insert(k.clone(), Value::Object(m));
            }
            "items" => {
                out.insert(k.clone(), to_gemini_schema(val)?);
            }
            "anyOf" => {
                let items = val.as_array()?;
                let conv: Option<Vec<Value>> = items.iter().map(to_gemini_schema).collect();
                out.insert(k.clone(), Value::Array(conv?));
            }
            key if GEMINI_KEYS.contains(&key) => {
                out.insert(k.clone(), val.clone());
            }
            _ => return None,
        }
    }
    Some(Value::Object(out))
}

/// A Gemini `Schema` as JSON Schema: lower-case types, `nullable` as a `"null"` type.
pub(crate) fn from_gemini_schema(v: &Value) -> Value {
    let Some(obj) = v.as_object() else {
        return v.clone();
    };
    let nullable = obj
        .get("nullable")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut out = Map::new();
    for (k, val) in obj {
        match k.as_str() {
            "nullable" | "propertyOrdering" | "example" => {}
            "type" => {
                let t = Value::String(val.as_str().unwrap_or("").to_ascii_lowercase());
                let t = if nullable {
                    Value::Array(vec![t, Value::String("null".into())])
                } else {
                    t
                };
                out.insert("type".into(), t);
            }
            "properties" => {
                let m: Map<String, Value> = val
                    .as_object()
                    .map(|props| {
                        props
                            .iter()
                            .map(|(n, p)| (n.clone(), from_gemini_schema(p)))
                            .collect()
                    })
                    .unwrap_or_default();
                out.insert(k.clone(), Value::Object(m));
            }
            "items" => {
                out.insert(k.clone(), from_gemini_schema(val));
            }
            "anyOf" => {
                let items = val
                    .as_array()
                    .map(|a| a.iter().map(from_gemini_schema).collect())
                    .unwrap_or_default();
                out.insert(k.clone(), Value::Array(items));
            }
            _ => {
                out.insert(k.clone(), val.clone());
            }
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_schema_to_gemini_schema_uppercases_types() {
        let s = json!({"$schema":"x","type":"object","properties":{"city":{"type":"string","description":"d"},"n":{"type":["integer","null"]}},"required":["city"]});
        assert_eq!(
            to_gemini_schema(&s),
            Some(
                json!({"type":"OBJECT","properties":{"city":{"type":"STRING","description":"d"},"n":{"type":"INTEGER","nullable":true}},"required":["city"]})
            )
        );
    }

    #[test]
    fn json_schema_beyond_gemini_schema_is_refused() {
        assert_eq!(
            to_gemini_schema(&json!({"type":"object","additionalProperties":false})),
            None
        );
        assert_eq!(to_gemini_schema(&json!({"$ref":"#/$defs/x"})), None);
    }

    #[test]
    fn gemini_schema_to_json_schema_lowercases_types() {
        let s = json!({"type":"OBJECT","properties":{"a":{"type":"STRING","nullable":true}},"propertyOrdering":["a"]});
        assert_eq!(
            from_gemini_schema(&s),
            json!({"type":"object","properties":{"a":{"type":["string","null"]}}})
        );
    }
}
