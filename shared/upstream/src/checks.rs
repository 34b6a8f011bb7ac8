//! Checks of channel fields that both planes, the admin API and the provider modules run.

/// Checks an upstream channel's `base_url`: an absolute `http://` or `https://` URL with a host,
/// and no query string or fragment — request paths are appended to it, so a `?` or `#` in it
/// would turn them into a query or a fragment and send the request somewhere else. The message
/// never quotes the URL (it may carry a password).
pub fn check_base_url(url: &str) -> Result<(), String> {
    let url = url.trim();
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err("must be an http:// or https:// URL".to_owned());
    }
    if url.contains(['?', '#']) {
        return Err("must not carry a query string or fragment (`?` or `#`)".to_owned());
    }
    match url.parse::<http::Uri>() {
        Ok(uri) if uri.host().is_some_and(|h| !h.is_empty()) => Ok(()),
        _ => Err("must be an http:// or https:// URL with a host".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_url_without_a_host_is_refused() {
        for bad in ["http://:8080/v1", "https://:443", "http:///v1"] {
            assert_eq!(
                check_base_url(bad),
                Err("must be an http:// or https:// URL with a host".to_owned()),
                "{bad}"
            );
        }
    }

    #[test]
    fn base_urls_are_checked_without_quoting_them() {
        assert!(check_base_url("https://api.x.com/v1").is_ok());
        assert!(check_base_url(" http://127.0.0.1:9 ").is_ok());
        for bad in [
            "ftp://u:secret@x",
            "https://x/v1?a=1",
            "https://x/v1#f",
            "https://",
            "api.x.com",
        ] {
            let message = check_base_url(bad).unwrap_err();
            assert!(
                !message.contains("secret") && !message.contains("x/v1"),
                "{message}"
            );
        }
    }
}
