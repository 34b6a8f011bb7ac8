//! The masked examples a guardrail report carries: enough to recognise the kind of thing that
//! matched, never enough to read it back.

/// `text` (a finding of `kind`) masked: an e-mail keeps the first character of its local part
/// and of its domain, and the domain's last label (`j***@e***.com`); a card number its last four
/// digits (`**** **** **** 4242`); anything else its kind alone (`[PHONE]`).
pub fn mask(kind: &str, text: &str) -> String {
    match kind {
        "EMAIL" => mask_email(text).unwrap_or_else(|| format!("[{kind}]")),
        "CARD" => {
            let digits: Vec<char> = text.chars().filter(char::is_ascii_digit).collect();
            let last: String = digits[digits.len().saturating_sub(4)..].iter().collect();
            format!("**** **** **** {last}")
        }
        _ => format!("[{kind}]"),
    }
}

fn mask_email(text: &str) -> Option<String> {
    let (local, domain) = text.rsplit_once('@')?;
    let (host, tld) = domain.rsplit_once('.')?;
    let first = |s: &str| s.chars().next().map(String::from).unwrap_or_default();
    Some(format!("{}***@{}***.{tld}", first(local), first(host)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn examples_keep_only_what_names_the_kind() {
        assert_eq!(mask("EMAIL", "jane.doe@example.com"), "j***@e***.com");
        assert_eq!(mask("CARD", "4242-4242-4242-4242"), "**** **** **** 4242");
        assert_eq!(mask("PHONE", "+1 555 0100"), "[PHONE]");
        assert_eq!(mask("EMAIL", "not an address"), "[EMAIL]");
    }
}
