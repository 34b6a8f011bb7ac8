//! A small, documented subset of JSON Schema for the `json_schema` check: `type` (one name or a
//! list: `object`, `array`, `string`, `number`, `integer`, `boolean`, `null`), `properties`,
//! `required`, `additionalProperties` (`false` or a schema), `items` (one schema), `enum`,
//! `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum` (numbers), `minLength`,
//! `maxLength` (strings, in characters), `minItems`, `maxItems` (arrays), `minProperties`,
//! `maxProperties` (objects). `title`, `description`, `$schema`, `$id`, `default` and
//! `examples` are annotations and are ignored.
//!
//! Any other keyword (`pattern`, `oneOf`, `$ref`, `format`, …) is refused when the rule is
//! written, so a schema never looks enforced when it is not. This is pure code over
//! `serde_json::Value` rather than a full validator crate: answers are checked on the proxy's
//! request path, the subset covers what structured output schemas use, and every line of it is
//! mutation-tested with the engine.

use serde_json::{Map, Value};

/// Deepest schema accepted (nested `properties`/`items`).
pub const MAX_SCHEMA_DEPTH: usize = 32;
/// Largest schema accepted, in bytes of its JSON text.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;

const TYPES: [&str; 7] = [
    "object", "array", "string", "number", "integer", "boolean", "null",
];
const ANNOTATIONS: [&str; 6] = [
    "title",
    "description",
    "$schema",
    "$id",
    "default",
    "examples",
];
const COUNTS: [&str; 6] = [
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
];
const BOUNDS: [&str; 4] = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"];

/// Checks a schema against the subset: `Err((path, message))`, the path a JSON pointer into the
/// schema (`/properties/name/type`).
pub fn check_schema(schema: &Value) -> Result<(), (String, String)> {
    let size = serde_json::to_string(schema).map_or(usize::MAX, |t| t.len());
    if size > MAX_SCHEMA_BYTES {
        return Err((
            String::new(),
            format!("the schema is {size} bytes; at most {MAX_SCHEMA_BYTES} are allowed"),
        ));
    }
    check_at(schema, "", 0)
}

fn check_at(schema: &Value, at: &str, depth: usize) -> Result<(), (String, String)> {
    if depth > MAX_SCHEMA_DEPTH {
        return Err((
            at.to_owned(),
            format!("schemas nest at most {MAX_SCHEMA_DEPTH} deep"),
        ));
    }
    let Value::Object(map) = schema else {
        return Err((at.to_owned(), "a schema is a JSON object".to_owned()));
    };
    for (key, value) in map {
        let here = format!("{at}/{key}");
        check_keyword(key, value).map_err(|m| (here.clone(), m))?;
        match key.as_str() {
            "properties" => {
                for (name, sub) in value.as_object().into_iter().flatten() {
                    check_at(sub, &format!("{here}/{name}"), depth + 1)?;
                }
            }
            "items" => check_at(value, &here, depth + 1)?,
            "additionalProperties" if value.is_object() => check_at(value, &here, depth + 1)?,
            _ => {}
        }
    }
    Ok(())
}

/// One keyword's own value.
fn check_keyword(key: &str, value: &Value) -> Result<(), String> {
    match key {
        "type" => {
            let names: Vec<&Value> = match value {
                Value::Array(list) if !list.is_empty() => list.iter().collect(),
                other => vec![other],
            };
            if names
                .iter()
                .all(|n| n.as_str().is_some_and(|n| TYPES.contains(&n)))
            {
                Ok(())
            } else {
                Err(format!(
                    "type is one of {} or a list of them",
                    TYPES.join(", ")
                ))
            }
        }
        "properties" if value.is_object() => Ok(()),
        "properties" => Err("properties is an object of schemas".to_owned()),
        "required"
            if value
                .as_array()
                .is_some_and(|l| l.iter().all(Value::is_string)) =>
        {
            Ok(())
        }
        "required" => Err("required is a list of property names".to_owned()),
        "additionalProperties" if value.is_boolean() || value.is_object() => Ok(()),
        "additionalProperties" => Err("additionalProperties is a boolean or a schema".to_owned()),
        "items" => Ok(()),
        "enum" if value.as_array().is_some_and(|l| !l.is_empty()) => Ok(()),
        "enum" => Err("enum is a non-empty list of values".to_owned()),
        k if BOUNDS.contains(&k) && value.is_number() => Ok(()),
        k if BOUNDS.contains(&k) => Err(format!("{k} is a number")),
        k if COUNTS.contains(&k) && value.as_u64().is_some() => Ok(()),
        k if COUNTS.contains(&k) => Err(format!("{k} is a whole number, 0 or more")),
        k if ANNOTATIONS.contains(&k) => Ok(()),
        other => Err(format!(
            "keyword {:?} is not supported (type, properties, required, additionalProperties, \
             items, enum, minimum, maximum, exclusiveMinimum, exclusiveMaximum, minLength, \
             maxLength, minItems, maxItems, minProperties, maxProperties)",
            other.chars().take(40).collect::<String>()
        )),
    }
}

/// Validates a value against a schema checked by [`check_schema`]: the first problem, as
/// `(path, message)`, the path a JSON pointer into the value (`/items/0/name`).
pub fn validate(value: &Value, schema: &Value) -> Result<(), (String, String)> {
    validate_at(value, schema, &mut String::new())
}

fn validate_at(value: &Value, schema: &Value, at: &mut String) -> Result<(), (String, String)> {
    let Some(schema) = schema.as_object() else {
        return Ok(());
    };
    let fail = |at: &String, message: String| Err((at.clone(), message));
    if let Some(types) = schema.get("type") {
        if !type_matches(value, types) {
            return fail(
                at,
                format!("expected {}, found {}", type_text(types), kind(value)),
            );
        }
    }
    if let Some(Value::Array(allowed)) = schema.get("enum") {
        if !allowed.contains(value) {
            return fail(at, "not one of the enum's values".to_owned());
        }
    }
    bounds(value, schema).or_else(|m| fail(at, m))?;
    match value {
        Value::Object(map) => validate_object(map, schema, at),
        Value::Array(items) => {
            let Some(item_schema) = schema.get("items") else {
                return Ok(());
            };
            for (i, item) in items.iter().enumerate() {
                let len = at.len();
                at.push_str(&format!("/{i}"));
                validate_at(item, item_schema, at)?;
                at.truncate(len);
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn validate_object(
    map: &Map<String, Value>,
    schema: &Map<String, Value>,
    at: &mut String,
) -> Result<(), (String, String)> {
    for name in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !map.contains_key(name) {
            return Err((at.clone(), format!("required property {name:?} is missing")));
        }
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    for (name, item) in map {
        let len = at.len();
        at.push('/');
        at.push_str(name);
        match (
            properties.and_then(|p| p.get(name)),
            schema.get("additionalProperties"),
        ) {
            (Some(sub), _) => validate_at(item, sub, at)?,
            (None, Some(Value::Bool(false))) => {
                return Err((at.clone(), "property is not allowed".to_owned()))
            }
            (None, Some(sub @ Value::Object(_))) => validate_at(item, sub, at)?,
            (None, _) => {}
        }
        at.truncate(len);
    }
    Ok(())
}

/// The number, length and count bounds that apply to the value's type.
fn bounds(value: &Value, schema: &Map<String, Value>) -> Result<(), String> {
    let limit = |k: &str| schema.get(k).and_then(Value::as_u64);
    let (count, low, high) = match value {
        Value::Number(n) => return number_bounds(n.as_f64().unwrap_or(f64::NAN), schema),
        Value::String(s) => (s.chars().count(), "minLength", "maxLength"),
        Value::Array(a) => (a.len(), "minItems", "maxItems"),
        Value::Object(o) => (o.len(), "minProperties", "maxProperties"),
        _ => return Ok(()),
    };
    let count = count as u64;
    if let Some(min) = limit(low).filter(|min| count < *min) {
        return Err(format!("{count} is below {low} {min}"));
    }
    if let Some(max) = limit(high).filter(|max| count > *max) {
        return Err(format!("{count} is above {high} {max}"));
    }
    Ok(())
}

/// A bound keyword and whether a number is within it.
type Bound = (&'static str, fn(f64, f64) -> bool);

fn number_bounds(n: f64, schema: &Map<String, Value>) -> Result<(), String> {
    let get = |k: &str| schema.get(k).and_then(Value::as_f64);
    let checks: [Bound; 4] = [
        ("minimum", |n, b| n >= b),
        ("maximum", |n, b| n <= b),
        ("exclusiveMinimum", |n, b| n > b),
        ("exclusiveMaximum", |n, b| n < b),
    ];
    for (key, holds) in checks {
        if let Some(bound) = get(key).filter(|b| !holds(n, *b)) {
            return Err(format!("{n} is outside {key} {bound}"));
        }
    }
    Ok(())
}

fn type_matches(value: &Value, types: &Value) -> bool {
    match types {
        Value::Array(list) => list.iter().any(|t| type_matches(value, t)),
        Value::String(name) => match name.as_str() {
            "integer" => value.as_f64().is_some_and(|n| n.fract() == 0.0),
            "number" => value.is_number(),
            other => kind(value) == other,
        },
        _ => false,
    }
}

fn type_text(types: &Value) -> String {
    match types {
        Value::Array(list) => list
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        other => other.as_str().unwrap_or("?").to_owned(),
    }
}

/// The JSON type of a value, as a schema names it.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}
