//! Admin identities in the integration tests: every route the admin router serves (read from
//! the OpenAPI document it is built from), admin tokens created through the API, and calls made
//! with one.

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use super::{Reply, TestApp};

/// Routes the admin router serves outside the OpenAPI document.
pub const UNDOCUMENTED: [(&str, &str); 2] = [
    ("GET", "/api/v1/openapi.json"),
    ("GET", "/console/routes/explain"),
];

/// Every (method, route template) of the admin router, with the role its document states.
pub fn operations() -> Vec<(String, String, Option<String>)> {
    let doc = serde_json::to_value(switchyard_control_plane::api::openapi()).unwrap();
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if ["get", "put", "post", "patch", "delete"].contains(&method.as_str()) {
                out.push((
                    method.to_uppercase(),
                    path.clone(),
                    op["x-switchyard-role"].as_str().map(str::to_owned),
                ));
            }
        }
    }
    for (method, path) in UNDOCUMENTED {
        out.push((method.to_owned(), path.to_owned(), None));
    }
    out
}

pub fn method(name: &str) -> Method {
    Method::from_bytes(name.as_bytes()).unwrap()
}

/// A concrete path for a template: `{id}` becomes `id`.
pub fn concrete(template: &str, id: i64) -> String {
    template.replace("{id}", &id.to_string())
}

/// A new admin token named `name` with `role` (for the whole fleet), made by the bootstrap token:
/// its id and secret.
pub async fn new_token(app: &TestApp, name: &str, role: &str) -> (i64, String) {
    new_team_token(app, name, role, None).await
}

/// A new admin token named `name` with `role`, limited to `team` when it is `Some`: its id and
/// secret.
pub async fn new_team_token(
    app: &TestApp,
    name: &str,
    role: &str,
    team: Option<i64>,
) -> (i64, String) {
    let reply = app
        .post(
            "/api/v1/admin-tokens",
            json!({"name": name, "role": role, "team_id": team}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert_eq!(reply.body["role"], role);
    assert_eq!(reply.body["team_id"], json!(team));
    let secret = reply.body["token"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("sy-admin-"), "{secret}");
    assert!(secret.starts_with(reply.body["prefix"].as_str().unwrap()));
    (reply.body["id"].as_i64().unwrap(), secret)
}

/// `m path` with `token` and `body`.
pub async fn as_token(
    app: &TestApp,
    token: &str,
    m: &str,
    path: &str,
    body: Option<Value>,
) -> Reply {
    app.send(method(m), path, body, Some(token)).await
}
