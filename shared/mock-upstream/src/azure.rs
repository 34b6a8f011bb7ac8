//! Azure OpenAI's paths, answered like OpenAI's: the deployments surface
//! (`/openai/deployments/{deployment}/{operation}?api-version=...`, and the per-resource
//! `/openai/responses` and `/openai/models`), which needs an `api-version`, and the v1 surface
//! (`/openai/v1/{operation}`), which does not. The answers are OpenAI's; a missing
//! `api-version` gets Azure's own 404.

use std::borrow::Cow;

/// What an Azure path stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AzurePath<'a> {
    /// The OpenAI path answered for it (`/v1/chat/completions`, ...).
    pub openai: String,
    /// The deployment named in the path (the deployments surface's per-deployment operations).
    pub deployment: Option<&'a str>,
    /// Whether Azure requires the `api-version` query parameter on it.
    pub needs_api_version: bool,
}

/// The Azure path `path` is, if any.
pub(crate) fn parse(path: &str) -> Option<AzurePath<'_>> {
    let rest = path.strip_prefix("/openai/")?;
    if let Some(operation) = rest.strip_prefix("v1/") {
        return Some(AzurePath {
            openai: format!("/v1/{operation}"),
            deployment: None,
            needs_api_version: false,
        });
    }
    if let Some(rest) = rest.strip_prefix("deployments/") {
        let (deployment, operation) = rest.split_once('/')?;
        return (!deployment.is_empty()).then(|| AzurePath {
            openai: format!("/v1/{operation}"),
            deployment: Some(deployment),
            needs_api_version: true,
        });
    }
    Some(AzurePath {
        openai: format!("/v1/{rest}"),
        deployment: None,
        needs_api_version: true,
    })
}

/// The OpenAI path a request to `path` is answered as: itself unless it is an Azure path.
pub(crate) fn openai_path(path: &str) -> Cow<'_, str> {
    match parse(path) {
        Some(azure) => Cow::Owned(azure.openai),
        None => Cow::Borrowed(path),
    }
}

/// Whether a request to `path` with `query` lacks the `api-version` Azure requires on it.
pub(crate) fn lacks_api_version(path: &str, query: Option<&str>) -> bool {
    parse(path).is_some_and(|azure| {
        azure.needs_api_version
            && !query.into_iter().flat_map(|q| q.split('&')).any(|pair| {
                pair.strip_prefix("api-version=")
                    .is_some_and(|v| !v.is_empty())
            })
    })
}

/// Azure OpenAI's answer to a request without `api-version`: a 404 with its error shape.
pub(crate) const RESOURCE_NOT_FOUND: &str =
    r#"{"error":{"code":"404","message":"Resource not found"}}"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn azure_paths_stand_for_openai_ones() {
        let chat = parse("/openai/deployments/gpt-4o-prod/chat/completions").unwrap();
        assert_eq!(chat.openai, "/v1/chat/completions");
        assert_eq!(chat.deployment, Some("gpt-4o-prod"));
        assert!(chat.needs_api_version);
        let responses = parse("/openai/responses").unwrap();
        assert_eq!(
            (responses.openai.as_str(), responses.deployment),
            ("/v1/responses", None)
        );
        assert!(responses.needs_api_version);
        let v1 = parse("/openai/v1/embeddings").unwrap();
        assert_eq!(
            (v1.openai.as_str(), v1.needs_api_version),
            ("/v1/embeddings", false)
        );
        assert_eq!(parse("/openai/deployments//chat/completions"), None);
        assert_eq!(parse("/openai/deployments/d"), None);
        assert_eq!(parse("/v1/chat/completions"), None);
        assert_eq!(openai_path("/v1/messages"), "/v1/messages");
        assert_eq!(
            openai_path("/openai/deployments/e/embeddings"),
            "/v1/embeddings"
        );
    }

    #[test]
    fn the_deployments_surface_needs_an_api_version() {
        let chat = "/openai/deployments/d/chat/completions";
        assert!(lacks_api_version(chat, None));
        assert!(lacks_api_version(chat, Some("x=1&api-version=")));
        assert!(!lacks_api_version(chat, Some("x=1&api-version=2024-10-21")));
        assert!(lacks_api_version(
            "/openai/responses",
            Some("api-versions=1")
        ));
        assert!(!lacks_api_version("/openai/v1/chat/completions", None));
        assert!(!lacks_api_version("/v1/chat/completions", None));
    }
}
