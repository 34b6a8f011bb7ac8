//! The JSON schema subset of the `json_schema` guardrail check.
#![allow(clippy::unwrap_used)]

use serde_json::{json, Value};
use switchyard_engine::guard::schema::{check_schema, validate, MAX_SCHEMA_DEPTH};

fn problem(value: Value, schema: Value) -> (String, String) {
    check_schema(&schema).unwrap();
    validate(&value, &schema).unwrap_err()
}

fn ok(value: Value, schema: Value) {
    check_schema(&schema).unwrap();
    validate(&value, &schema).unwrap();
}

#[test]
fn types_including_lists_and_integers() {
    ok(json!(1), json!({"type": "integer"}));
    ok(json!(1.0), json!({"type": "integer"}));
    ok(json!(1.5), json!({"type": "number"}));
    ok(json!(null), json!({"type": ["string", "null"]}));
    ok(json!(true), json!({"type": "boolean"}));
    ok(json!([]), json!({"type": "array"}));
    ok(json!({}), json!({}));
    assert_eq!(
        problem(json!(1.5), json!({"type": "integer"})).1,
        "expected integer, found number"
    );
    assert_eq!(
        problem(json!(3), json!({"type": ["string", "null"]})).1,
        "expected string or null, found number"
    );
    assert_eq!(
        problem(json!("x"), json!({"type": "object"})).1,
        "expected object, found string"
    );
}

#[test]
fn objects_properties_required_and_additional() {
    let schema = json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["name"],
        "additionalProperties": false
    });
    ok(json!({"name": "a", "tags": ["x"]}), schema.clone());
    assert_eq!(
        problem(json!({"tags": []}), schema.clone()),
        ("".into(), "required property \"name\" is missing".into())
    );
    assert_eq!(
        problem(json!({"name": "a", "extra": 1}), schema.clone()),
        ("/extra".into(), "property is not allowed".into())
    );
    assert_eq!(
        problem(json!({"name": "a", "tags": ["x", 2]}), schema).0,
        "/tags/1"
    );
    let typed_rest = json!({"additionalProperties": {"type": "number"}});
    ok(json!({"a": 1}), typed_rest.clone());
    assert_eq!(problem(json!({"a": "1"}), typed_rest).0, "/a");
    ok(
        json!({"a": "anything"}),
        json!({"additionalProperties": true}),
    );
}

#[test]
fn enums_and_bounds() {
    ok(json!("red"), json!({"enum": ["red", "green"]}));
    assert_eq!(
        problem(json!("blue"), json!({"enum": ["red"]})).1,
        "not one of the enum's values"
    );
    let n = json!({"minimum": 1, "maximum": 3});
    ok(json!(1), n.clone());
    ok(json!(3), n.clone());
    assert!(problem(json!(0), n.clone()).1.contains("minimum"));
    assert!(problem(json!(4), n).1.contains("maximum"));
    let x = json!({"exclusiveMinimum": 1, "exclusiveMaximum": 3});
    ok(json!(2), x.clone());
    assert!(problem(json!(1), x.clone()).1.contains("exclusiveMinimum"));
    assert!(problem(json!(3), x).1.contains("exclusiveMaximum"));
    let s = json!({"minLength": 2, "maxLength": 3});
    ok(json!("ab"), s.clone());
    ok(json!("äöü"), s.clone());
    assert_eq!(problem(json!("a"), s.clone()).1, "1 is below minLength 2");
    assert_eq!(problem(json!("abcd"), s).1, "4 is above maxLength 3");
    let a = json!({"minItems": 1, "maxItems": 1});
    ok(json!([1]), a.clone());
    assert!(problem(json!([]), a.clone()).1.contains("minItems"));
    assert!(problem(json!([1, 2]), a).1.contains("maxItems"));
    let o = json!({"minProperties": 1, "maxProperties": 1});
    ok(json!({"a": 1}), o.clone());
    assert!(problem(json!({}), o.clone()).1.contains("minProperties"));
    assert!(problem(json!({"a": 1, "b": 2}), o)
        .1
        .contains("maxProperties"));
    ok(json!(true), json!({"minLength": 5, "minimum": 9}));
}

#[test]
fn schemas_outside_the_subset_are_refused_with_their_path() {
    let refused = |schema: Value| check_schema(&schema).unwrap_err();
    let (at, message) = refused(json!({"properties": {"a": {"pattern": "x"}}}));
    assert_eq!(at, "/properties/a/pattern");
    assert!(
        message.starts_with("keyword \"pattern\" is not supported"),
        "{message}"
    );
    assert_eq!(refused(json!({"type": "date"})).0, "/type");
    assert_eq!(refused(json!({"type": []})).0, "/type");
    assert_eq!(refused(json!({"properties": []})).0, "/properties");
    assert_eq!(refused(json!({"required": [1]})).0, "/required");
    assert_eq!(
        refused(json!({"additionalProperties": 1})).0,
        "/additionalProperties"
    );
    assert_eq!(
        refused(json!({"additionalProperties": {"oneOf": []}})).0,
        "/additionalProperties/oneOf"
    );
    assert_eq!(refused(json!({"items": {"$ref": "#"}})).0, "/items/$ref");
    assert_eq!(refused(json!({"enum": []})).0, "/enum");
    assert_eq!(refused(json!({"minimum": "1"})).0, "/minimum");
    assert_eq!(refused(json!({"minLength": -1})).0, "/minLength");
    assert_eq!(refused(json!(true)).1, "a schema is a JSON object");
    check_schema(&json!({"title": "t", "description": "d", "$schema": "s", "$id": "i", "default": 1, "examples": []})).unwrap();
    let mut deep = json!({"type": "array"});
    for _ in 0..MAX_SCHEMA_DEPTH {
        deep = json!({"items": deep});
    }
    check_schema(&deep).unwrap();
    let deeper = json!({"items": deep});
    assert!(refused(deeper).1.contains("nest at most"));
    let big = json!({"description": "x".repeat(70_000)});
    assert!(refused(big).1.contains("bytes"));
}
