//! Standalone YAML configuration: the file's schema and its validation live in
//! `switchyard-config` (one schema for the standalone proxy and the fleet's config as code);
//! this module reads the file and resolves `${ENV}` references from the proxy's environment.

use std::path::Path;

use switchyard_engine::SnapshotParts;

pub use switchyard_config::{
    err, parse_raw, token_hash, Amount, ConfigError, RawChannel, RawConfig, RawCredential,
    RawLimit, RawMember, RawPrice, RawRoute, RawTeam, RawToken, MAX_EXPANDED_BYTES, MAX_FILE_BYTES,
    VALUE_OVERHEAD,
};

/// Reads, parses and validates a YAML file; `revision` becomes the snapshot's revision.
pub fn load_file(path: &Path, revision: u64) -> Result<SnapshotParts, ConfigError> {
    load_standalone(path, revision).map(|(parts, _)| parts)
}

/// [`load_file`], also returning the file's `listen` address (used at start).
pub fn load_standalone(
    path: &Path,
    revision: u64,
) -> Result<(SnapshotParts, Option<std::net::SocketAddr>), ConfigError> {
    // Never more than the longest file the schema allows is read.
    let text = switchyard_config::read_file(path)?;
    let raw = parse_raw(&text)?;
    let listen = raw.listen;
    Ok((
        raw.into_parts(revision, &|name| std::env::var(name).ok())?,
        listen,
    ))
}

pub fn parse_yaml(text: &str, revision: u64) -> Result<SnapshotParts, ConfigError> {
    parse_raw(text)?.into_parts(revision, &|name| std::env::var(name).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_engine::{Provider, SecretSource};

    fn parse(yaml: &str) -> Result<SnapshotParts, String> {
        parse_yaml(yaml, 1).map_err(|e| e.to_string())
    }

    #[test]
    fn minimal_config_compiles_with_defaults() {
        let parts = parse(
            "channels:\n  - name: a\n    provider: mock\nroutes:\n  - model_pattern: m\n    members:\n      - channel: a\ntokens:\n  - name: t\n    token: secret\n",
        )
        .unwrap();
        assert_eq!(parts.channels[0].credentials.len(), 1);
        assert_eq!(parts.routes[0].members[0].upstream_model, "m");
        assert_eq!(parts.routes[0].members[0].group_name, "default");
        assert_eq!(parts.tokens[0].hash, token_hash("secret"));
    }

    #[test]
    fn unknown_channel_names_the_field_path() {
        let e = parse(
            "channels: []\nroutes:\n  - model_pattern: m\n    members:\n      - channel: nope\n",
        )
        .unwrap_err();
        assert_eq!(e, "routes[0].members[0].channel: unknown channel \"nope\"");
    }

    #[test]
    fn parse_errors_name_the_field_path() {
        let e = parse("settings:\n  retry_times: many\n").unwrap_err();
        assert!(e.starts_with("settings.retry_times: "), "{e}");
        let e = parse("channels:\n  - name: a\n    provider: mock\n    colour: red\n").unwrap_err();
        assert!(
            e.starts_with("channels[0].colour: unknown field `colour`"),
            "{e}"
        );
    }

    const SCOPES: &str = "channels:\n  - name: a\n    provider: mock\nroutes:\n  - model_pattern: m\n    members:\n      - { id: 7, channel: a }\nteams:\n  - { name: t1, models: ['*'] }\ntokens:\n  - { name: k, token: secret, team: t1 }\n";

    #[test]
    fn prices_and_limits_compile_exactly_and_name_their_scope() {
        let parts = parse(&format!(
            "{SCOPES}prices:\n  - {{ channel: a, model_pattern: 'gpt-*', input_per_million: \"2.50\", output_per_million: 10, cached_input_per_million: 0.1 }}\nlimits:\n  - {{ token: k, metric: requests, window: minute, value: 600 }}\n  - {{ team: t1, metric: spend, window: month, value: \"25.5\", mode: soft }}\n  - {{ route: m, metric: concurrent, value: 4 }}\n  - {{ channel: a, metric: tokens, window: minute, value: 90000 }}\n  - {{ member: 7, metric: requests, window: day, value: 10 }}\n"
        ))
        .unwrap();
        let p = &parts.prices[0];
        assert_eq!(
            (
                p.input_per_million,
                p.output_per_million,
                p.cached_input_per_million
            ),
            (2_500_000, 10_000_000, Some(100_000))
        );
        let keys: Vec<String> = parts.limits.iter().map(|l| l.limit.key.name()).collect();
        assert_eq!(
            keys,
            [
                "token:1:requests:minute",
                "team:1:spend:month",
                "route:1:concurrent:none",
                "channel:1:tokens:minute",
                "member:7:requests:day"
            ]
        );
        assert_eq!(parts.limits[1].limit.value, 25_500_000, "micro-USD");
        assert_eq!(
            parts.limits[1].limit.mode,
            switchyard_engine::LimitMode::Soft
        );
    }

    #[test]
    fn guardrails_load_with_their_scope_and_checks() {
        let parts = parse(&format!(
            "{SCOPES}guardrails:\n  - name: pii\n    route: m\n    stage: request\n    action: redact\n    restore: true\n    checks:\n      detectors: [email, card]\n      patterns:\n        - {{ regex: 'EMP-[0-9]{{6}}', label: EMPLOYEE_ID, max_match_bytes: 10 }}\n  - name: size\n    team: t1\n    action: block\n    mode: shadow\n    checks: {{ max_input_tokens: 1000, max_messages: 20 }}\n  - name: tools\n    token: k\n    action: log\n    checks:\n      tools: {{ denied: [shell] }}\n      moderation: {{ channel: a }}\n  - name: json\n    stage: response\n    action: block\n    enabled: false\n    checks:\n      json_schema:\n        schema: {{ type: object, required: [answer] }}\n"
        ))
        .unwrap();
        use switchyard_engine::guard::rule::{GuardAction, GuardMode, GuardScope, GuardStage};
        let g = &parts.guardrails;
        assert_eq!(g.len(), 4);
        assert_eq!(
            (g[0].scope, g[0].stage),
            (GuardScope::Route(1), GuardStage::Request)
        );
        assert_eq!((g[0].action, g[0].restore), (GuardAction::Redact, true));
        assert_eq!(g[0].checks.detectors.len(), 2);
        assert_eq!(g[0].checks.patterns[0].max_match_bytes, 10);
        assert_eq!(
            (g[1].scope, g[1].mode),
            (GuardScope::Team(1), GuardMode::Shadow)
        );
        assert_eq!(g[1].checks.max_input_tokens, Some(1000));
        assert_eq!(g[2].scope, GuardScope::Token(1));
        assert_eq!(g[2].stage, GuardStage::Both);
        assert_eq!(g[3].scope, GuardScope::All);
        assert!(!g[3].enabled);
        let snapshot = switchyard_engine::Snapshot::new(parts);
        assert!(snapshot.guards().problems().is_empty());
        let text = "mail a@b.io about EMP-123456";
        let rule = &snapshot.guards().rules()[0];
        assert_eq!(snapshot.guards().scan(rule, text).len(), 2);
    }

    #[test]
    fn bad_guardrails_name_the_field() {
        let rule = |body: &str| format!("{SCOPES}guardrails:\n  - name: g\n{body}");
        for (body, expected) in [
            (
                "    action: log\n    checks: { patterns: [{ regex: '(' }] }\n",
                "guardrails[0].checks.patterns[0].regex: regex parse error",
            ),
            (
                "    action: log\n    checks: { detectors: [ssn] }\n",
                "guardrails[0].checks.detectors: unknown detector \"ssn\"",
            ),
            (
                "    route: nope\n    action: log\n    checks: { detectors: [email] }\n",
                "guardrails[0].route: unknown route \"nope\"",
            ),
            (
                "    team: t1\n    token: k\n    action: log\n    checks: { detectors: [email] }\n",
                "guardrails[0]: at most one of",
            ),
            (
                "    action: log\n    checks: { moderation: { channel: z } }\n",
                "guardrails[0].checks.moderation.channel: unknown channel \"z\"",
            ),
            (
                "    action: block\n    checks: { max_messages: 0 }\n",
                "guardrails[0].checks.max_messages: max_messages must be 1 or more",
            ),
            (
                "    action: block\n    checks: { webhook: { url: 'ftp://x', timeout_ms: 5, on_failure: open } }\n",
                "guardrails[0].checks.webhook.url:",
            ),
            (
                "    action: erase\n    checks: { detectors: [email] }\n",
                "guardrails[0].action: unknown action \"erase\"",
            ),
            (
                "    action: log\n    checks: { colour: red }\n",
                "guardrails[0].checks.colour: unknown field `colour`",
            ),
        ] {
            let e = parse(&rule(body)).unwrap_err();
            assert!(e.starts_with(expected), "{e}\nexpected: {expected}");
        }
        let twice = format!(
            "{SCOPES}guardrails:\n  - {{ name: g, action: log, checks: {{ detectors: [email] }} }}\n  - {{ name: g, action: log, checks: {{ detectors: [email] }} }}\n"
        );
        assert!(parse(&twice)
            .unwrap_err()
            .starts_with("guardrails[1].name: another guardrail"));
    }

    #[test]
    fn bad_prices_limits_and_expiries_name_the_field() {
        for (extra, expected) in [
            (
                "limits:\n  - { token: nobody, metric: requests, window: minute, value: 1 }\n",
                "limits[0].token: unknown token \"nobody\"",
            ),
            (
                "limits:\n  - { token: k, team: t1, metric: requests, window: minute, value: 1 }\n",
                "limits[0]: exactly one of",
            ),
            (
                "limits:\n  - { token: k, metric: spend, window: minute, value: 1 }\n",
                "limits[0].window: a `spend` limit counts per day, week, month or 2d to 90d",
            ),
            (
                "limits:\n  - { token: k, metric: concurrent, window: hour, value: 1 }\n",
                "limits[0].window: a `concurrent` limit has no window",
            ),
            (
                "limits:\n  - { token: k, metric: requests, window: minute, value: 0 }\n",
                "limits[0].value: must be between 1 and",
            ),
            (
                "limits:\n  - { token: k, metric: requests, window: minute, value: 1.5 }\n",
                "limits[0].value: \"1.5\" is not a whole number",
            ),
            (
                "limits:\n  - { channel: a, metric: spend, window: day, value: 1 }\n",
                "limits[0].metric: a channel or member limit counts",
            ),
            (
                "limits:\n  - { member: 99, metric: requests, window: day, value: 1 }\n",
                "limits[0].member: unknown member id 99",
            ),
            (
                "limits:\n  - { token: k, metric: requests, window: minute, value: 1, mode: maybe }\n",
                "limits[0].mode: `maybe` is not one of hard, soft",
            ),
            (
                "limits:\n  - { token: k, metric: requests, window: minute, value: 1 }\n  - { token: k, metric: requests, window: minute, value: 2 }\n",
                "limits[1]: another limit already counts",
            ),
            (
                "limits:\n  - { tag: acme, end_user: u, metric: requests, window: minute, value: 1 }\n",
                "limits[0]: exactly one of",
            ),
            (
                "limits:\n  - { each_end_user: true, token: k, metric: requests, window: minute, value: 1 }\n",
                "limits[0]: exactly one of",
            ),
            (
                "limits:\n  - { tag: 'a b', metric: requests, window: minute, value: 1 }\n",
                "limits[0].tag: a tag is 1 to 64 characters",
            ),
            (
                "limits:\n  - { end_user: '', metric: requests, window: minute, value: 1 }\n",
                "limits[0].end_user: an end user is 1 to 256 characters",
            ),
            (
                "limits:\n  - { each_end_user: true, metric: requests, window: minute, value: 1 }\n  - { each_end_user: true, metric: requests, window: minute, value: 2 }\n",
                "limits[1]: another limit already counts",
            ),
            (
                "prices:\n  - { channel: b, model_pattern: m, input_per_million: 1, output_per_million: 1 }\n",
                "prices[0].channel: unknown channel \"b\"",
            ),
            (
                "prices:\n  - { channel: a, model_pattern: m, input_per_million: \"0.0000001\", output_per_million: 1 }\n",
                "prices[0].input_per_million: `0.0000001` has more than 6 decimals",
            ),
            (
                "prices:\n  - { channel: a, model_pattern: m, input_per_million: -1, output_per_million: 1 }\n",
                "prices[0].input_per_million: `-1` is not a non-negative decimal number",
            ),
            (
                "prices:\n  - { channel: a, model_pattern: m, input_per_million: 1, output_per_million: 1 }\n  - { channel: a, model_pattern: m, input_per_million: 2, output_per_million: 2 }\n",
                "prices[1].model_pattern: the channel already has a price for \"m\"",
            ),
        ] {
            let e = parse(&format!("{SCOPES}{extra}")).unwrap_err();
            assert!(e.starts_with(expected), "{e}\nexpected: {expected}");
        }
        let e =
            parse(&SCOPES.replace("team: t1 }", "team: t1, expires_at: tomorrow }")).unwrap_err();
        assert!(
            e.starts_with("tokens[0].expires_at: \"tomorrow\" is not an RFC 3339 timestamp"),
            "{e}"
        );
        let parts = parse(&SCOPES.replace(
            "team: t1 }",
            "team: t1, expires_at: '2027-01-31T00:00:00Z' }",
        ))
        .unwrap();
        assert_eq!(parts.tokens[0].expires_at, Some(1_801_353_600_000));
    }

    #[test]
    fn out_of_range_setting_names_the_field() {
        let e = parse("settings:\n  retry_times: 1000\n").unwrap_err();
        assert!(e.starts_with("settings.retry_times: "), "{e}");
    }

    #[test]
    fn env_credentials_are_references_and_missing_token_env_is_an_error() {
        let parts = parse(
            "channels:\n  - name: a\n    provider: openai\n    base_url: https://api.example.com/v1/\n    credentials: [\"${SWITCHYARD_TEST_KEY_X}\"]\n",
        )
        .unwrap();
        assert_eq!(
            parts.channels[0].credentials[0].secret,
            SecretSource::Env("SWITCHYARD_TEST_KEY_X".into())
        );
        assert_eq!(parts.channels[0].base_url, "https://api.example.com/v1");
        let e = parse("tokens:\n  - name: t\n    token: \"${SWITCHYARD_SURELY_UNSET_VAR}\"\n")
            .unwrap_err();
        assert_eq!(
            e,
            "tokens[0].token: environment variable SWITCHYARD_SURELY_UNSET_VAR is not set"
        );
    }

    #[test]
    fn real_channels_need_credentials_and_url() {
        let e = parse("channels:\n  - name: a\n    provider: openai\n    base_url: https://x\n")
            .unwrap_err();
        assert_eq!(
            e,
            "channels[0].credentials: at least one credential is required"
        );
        let e = parse("channels:\n  - name: a\n    provider: openai\n    credentials: [k]\n")
            .unwrap_err();
        assert_eq!(e, "channels[0].base_url: is required");
    }

    /// One channel `a` (openai, one credential) plus `extra` lines under it, and one route.
    fn with_channel(credential: &str, extra: &str, member: &str) -> String {
        format!(
            "channels:\n  - name: a\n    provider: openai\n    base_url: https://x.test\n    credentials: [{credential}]\n{extra}routes:\n  - model_pattern: m\n    members:\n      - channel: a\n{member}"
        )
    }

    #[test]
    fn control_characters_in_secrets_are_rejected_without_quoting_them() {
        for secret in [
            r#""sk-LEAKME-1\r\nx-injected: 1""#,
            r#""sk-LEAKME-2\nmore""#,
            r#""sk-LEAKME-3\0""#,
            r#"{secret: "sk-LEAKME-4\rx"}"#,
        ] {
            let e = parse(&with_channel(secret, "", "")).unwrap_err();
            assert!(
                e.starts_with("channels[0].credentials[0]: contains a control character"),
                "{e}"
            );
            assert!(!e.contains("LEAKME"), "{e}");
        }
        // A trailing newline (a YAML block scalar) is trimmed, not refused.
        let parts = parse(&with_channel("\"sk-ok\\n\"", "", "")).unwrap();
        assert_eq!(
            parts.channels[0].credentials[0].secret,
            SecretSource::Inline("sk-ok".into())
        );
    }

    #[test]
    fn control_characters_in_single_line_fields_name_the_field() {
        let cases = [
            (
                with_channel("k", "", "        upstream_model: \"m\\r\\nx\"\n"),
                "routes[0].members[0].upstream_model: ",
            ),
            (
                with_channel("k", "", "        group: \"g\\nx\"\n"),
                "routes[0].members[0].group: ",
            ),
            (
                with_channel("k", "    headers: {x-key: \"v\\r\\nx-injected: 1\"}\n", ""),
                "channels[0].headers.x-key: header value contains a control character",
            ),
            (
                with_channel("k", "    headers: {x-key: \"v\\0\"}\n", ""),
                "channels[0].headers.x-key: ",
            ),
            (
                with_channel("k", "    headers: {\"x key\": v}\n", ""),
                "channels[0].headers: header name contains an invalid character",
            ),
            (
                with_channel("k", "    retry_error_patterns: [\"a\\0\"]\n", ""),
                "channels[0].retry_error_patterns[0]: contains a NUL",
            ),
            (
                "channels:\n  - name: \"a\\nb\"\n    provider: mock\n".to_owned(),
                "channels[0].name: ",
            ),
            (
                "channels:\n  - name: a\n    provider: openai\n    base_url: \"https://x.test/\\r\\nv1\"\n    credentials: [k]\n".to_owned(),
                "channels[0].base_url: ",
            ),
            (
                "teams:\n  - name: \"t\\0\"\n".to_owned(),
                "teams[0].name: ",
            ),
            (
                "tokens:\n  - name: t\n    token: x\n    route_group: \"g\\r\"\n".to_owned(),
                "tokens[0].route_group: ",
            ),
            (
                "tokens:\n  - name: \"t\\n\"\n    token: x\n".to_owned(),
                "tokens[0].name: ",
            ),
        ];
        for (yaml, want) in cases {
            let e = parse(&yaml).unwrap_err();
            assert!(e.starts_with(want), "{yaml}\n=> {e}");
        }
        // A tab is a valid header value character.
        parse(&with_channel("k", "    headers: {x-key: \"a\\tb\"}\n", "")).unwrap();
    }

    #[test]
    fn an_azure_channel_takes_its_api_version_from_its_headers() {
        let azure = |headers: &str| {
            format!(
                "channels:\n  - name: a\n    provider: azure\n    base_url: https://contoso.openai.azure.com/\n    credentials: [k]\n{headers}"
            )
        };
        let parts = parse(&azure("    headers: {api-version: 2025-04-01-preview}\n")).unwrap();
        let channel = &parts.channels[0];
        assert_eq!(channel.provider, Provider::Azure);
        assert_eq!(channel.base_url, "https://contoso.openai.azure.com");
        assert_eq!(
            channel.headers,
            [("api-version".to_owned(), "2025-04-01-preview".to_owned())]
        );
        parse(&azure("")).unwrap();
        let e = parse(&azure(
            "    headers: {api-version: \"2024-10-21&key=SECRET1\"}\n",
        ))
        .unwrap_err();
        assert!(
            e.starts_with("channels[0].headers.api-version: may hold only letters"),
            "{e}"
        );
        assert!(!e.contains("SECRET1"), "{e}");
        // So is an entry for one kind of endpoint; a name of no kind is an ordinary header.
        let parts = parse(&azure("    headers: {api-version-responses: preview}\n")).unwrap();
        assert_eq!(
            parts.channels[0].headers,
            [("api-version-responses".to_owned(), "preview".to_owned())]
        );
        let e = parse(&azure("    headers: {api-version-chat: \"a b\"}\n")).unwrap_err();
        assert!(
            e.starts_with("channels[0].headers.api-version-chat: may hold only letters"),
            "{e}"
        );
        parse(&azure("    headers: {api-version-rerank: \"a b\"}\n")).unwrap();
        // Another provider's `api-version` entry is an ordinary header.
        parse(&with_channel(
            "k",
            "    headers: {api-version: \"a b\"}\n",
            "",
        ))
        .unwrap();
        let e = parse(&azure("").replace("azure\n", "azure-openai\n")).unwrap_err();
        assert!(
            e.contains("(openai, azure, anthropic, gemini, vertex, bedrock, mock)"),
            "{e}"
        );
    }

    fn vertex_key(edit: impl FnOnce(&mut serde_json::Value)) -> String {
        let mut key = serde_json::json!({
            "type": "service_account",
            "project_id": "p-1",
            "private_key_id": "k1",
            "private_key": include_str!("../../../shared/mock-upstream/fixtures/vertex-test-key.pem"),
            "client_email": "a@p-1.iam.gserviceaccount.com",
            "token_uri": "https://oauth2.googleapis.com/token",
        });
        edit(&mut key);
        serde_json::to_string_pretty(&key).unwrap()
    }

    #[test]
    fn a_vertex_channel_takes_a_service_account_key_file() {
        let vertex = |base_url: &str, credential: &str| {
            let indented = credential.replace('\n', "\n        ");
            format!(
                "channels:\n  - name: v\n    provider: vertex\n    base_url: {base_url}\n    credentials:\n      - |\n        {indented}\n"
            )
        };
        let parts = parse(&vertex(
            "https://us-central1-aiplatform.googleapis.com",
            &vertex_key(|_| {}),
        ))
        .unwrap();
        let channel = &parts.channels[0];
        assert_eq!(channel.provider, Provider::Vertex);
        let SecretSource::Inline(secret) = &channel.credentials[0].secret else {
            panic!("inline");
        };
        assert!(secret.contains("\"type\": \"service_account\""));
        // By environment reference: checked by the proxy when it resolves it.
        parse(
            "channels:\n  - name: v\n    provider: vertex\n    base_url: https://aiplatform.googleapis.com\n    credentials: [\"${VERTEX_KEY}\"]\n"
        )
        .unwrap();
        let e = parse(&vertex("https://x/v1/projects/p", &vertex_key(|_| {}))).unwrap_err();
        assert!(
            e.starts_with("channels[0].base_url: a Vertex AI base_url is"),
            "{e}"
        );
        let e = parse(&vertex(
            "https://aiplatform.googleapis.com",
            &vertex_key(|k| k["private_key"] = "-----BEGIN PRIVATE KEY-----SECRET1".into()),
        ))
        .unwrap_err();
        assert!(
            e.starts_with("channels[0].credentials[0]: `private_key` is not a PEM RSA private key"),
            "{e}"
        );
        assert!(!e.contains("SECRET1"), "{e}");
        let e = parse(&vertex(
            "https://aiplatform.googleapis.com",
            "sk-not-a-key-SECRET1",
        ))
        .unwrap_err();
        assert!(
            e.contains("credentials[0]: is not a service-account key file"),
            "{e}"
        );
        assert!(!e.contains("SECRET1"), "{e}");
    }

    #[test]
    fn a_bedrock_channel_takes_an_aws_access_key() {
        let bedrock = |base_url: &str, credential: &str| {
            format!(
                "channels:\n  - name: b\n    provider: bedrock\n    base_url: {base_url}\n    credentials:\n      - '{credential}'\n"
            )
        };
        let key = r#"{"access_key_id":"AKIAIOSFODNN7EXAMPLE","secret_access_key":"wJalr/SECRET1","region":"eu-west-1"}"#;
        let parts = parse(&bedrock(
            "https://bedrock-runtime.us-east-1.amazonaws.com",
            key,
        ))
        .unwrap();
        let channel = &parts.channels[0];
        assert_eq!(channel.provider, Provider::Bedrock);
        let SecretSource::Inline(secret) = &channel.credentials[0].secret else {
            panic!("inline");
        };
        assert_eq!(secret, key);
        // By environment reference: checked by the proxy when it resolves it.
        parse(
            "channels:\n  - name: b\n    provider: bedrock\n    base_url: https://bedrock-runtime.us-east-1.amazonaws.com\n    credentials: [\"${BEDROCK_KEY}\"]\n"
        )
        .unwrap();
        let e = parse(&bedrock("https://bedrock.us-east-1.amazonaws.com", key)).unwrap_err();
        assert!(
            e.starts_with("channels[0].base_url: a Bedrock base_url on amazonaws.com is"),
            "{e}"
        );
        for (bad, expected) in [
            ("AKIAIOSFODNN7EXAMPLE:SECRET1", "is a JSON object"),
            (
                r#"{"access_key_id":"AKIAIOSFODNN7EXAMPLE","secret_access_key":"SECRET1 x"}"#,
                "secret_access_key must be",
            ),
        ] {
            let e = parse(&bedrock("http://127.0.0.1:9", bad)).unwrap_err();
            assert!(e.starts_with("channels[0].credentials[0]: "), "{e}");
            assert!(e.contains(expected), "{e}");
            assert!(!e.contains("SECRET1"), "{e}");
        }
    }

    #[test]
    fn a_bad_base_url_is_quoted_without_its_password() {
        let e = parse(
            "channels:\n  - name: a\n    provider: openai\n    base_url: \"ftp://u:PASSWORD1@x.test\"\n    credentials: [k]\n",
        )
        .unwrap_err();
        assert!(
            e.starts_with("channels[0].base_url: must be an http:// or https:// URL"),
            "{e}"
        );
        assert!(!e.contains("PASSWORD1"), "{e}");
        assert!(e.contains("u:***@x.test"), "{e}");
    }

    #[test]
    fn a_base_url_with_a_query_or_fragment_is_refused() {
        for url in [
            "https://x.test/v1?redirect=/evil",
            "https://x.test/v1#/evil",
        ] {
            let e = parse(&format!(
                "channels:\n  - name: a\n    provider: openai\n    base_url: \"{url}\"\n    credentials: [k]\n"
            ))
            .unwrap_err();
            assert!(
                e.starts_with("channels[0].base_url: must not carry a query string or fragment"),
                "{e}"
            );
        }
    }

    fn with_demo_token(channel: &str) -> String {
        format!(
            "channels:\n{channel}routes:\n  - model_pattern: m\n    members: [{{ channel: a }}]\ntokens:\n  - {{ name: demo, token: sk-switchyard-demo }}\n"
        )
    }

    #[test]
    fn the_published_demo_token_cannot_open_a_real_channel() {
        let real = "  - name: a\n    provider: openai\n    base_url: https://api.openai.com/v1\n    credentials: [sk-real-key]\n";
        let e = parse(&with_demo_token(real)).unwrap_err();
        assert!(
            e.starts_with("tokens[0].token: this token is published"),
            "{e}"
        );
        assert!(e.contains("\"a\" is a real upstream"), "{e}");
        assert!(!e.contains("sk-real-key"), "{e}");
        // The same token given by its hash is the same token.
        let hashed = with_demo_token(real).replace(
            "token: sk-switchyard-demo",
            &format!("token_sha256: {}", token_hash("sk-switchyard-demo")),
        );
        assert!(parse(&hashed).unwrap_err().starts_with("tokens[0].token"));
        // With simulated channels only, the demo token is fine.
        parse(&with_demo_token("  - name: a\n    provider: mock\n")).unwrap();
    }

    #[test]
    fn the_example_listens_on_loopback_and_opens_only_simulated_channels() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/standalone.yaml"
        ))
        .unwrap();
        let raw = parse_raw(&text).unwrap();
        let listen = raw.listen.unwrap();
        assert!(listen.ip().is_loopback(), "{listen}");
        assert!(raw.channels.iter().all(|c| c.provider == "mock"));
        parse(&text).unwrap();
    }

    /// The standalone file has the fleet's bounds: an alias bomb, a file too long (not read
    /// whole) and a nesting too deep are refused with what is too large.
    #[test]
    fn the_standalone_file_is_bounded_like_the_fleets() {
        let dir = std::env::temp_dir().join(format!("switchyard-bounds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let base = "channels:\n- name: a\n  provider: mock\n  retry_error_patterns: ";
        let bomb = format!(
            "{base}[&s \"{}\"{}]\n",
            "x".repeat(60 * 1024),
            ", *s".repeat(3_400)
        );
        let long = format!("{base}[\"{}\"]\n", "x".repeat(2 * 1024 * 1024));
        let deep = format!(
            "channels:\n- name: a\n  provider: mock\n  capabilities: {}1{}\n",
            "{a: ".repeat(10_000),
            "}".repeat(10_000)
        );
        for (name, text, expected) in [
            ("bomb.yaml", bomb, "once its aliases are expanded"),
            ("long.yaml", long, "longer than 1 MiB"),
            ("deep.yaml", deep, "deeper than 32 levels"),
        ] {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            let e = load_file(&path, 1).unwrap_err();
            assert!(e.message.contains(expected), "{name}: {e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
