//! The built-in detectors: each finds what it names and passes over what only looks like it.
#![allow(clippy::unwrap_used)]

use switchyard_engine::guard::detect::{
    compile_pattern, luhn, parse_detectors, valid_card, valid_email, valid_iban, Detector, Matcher,
};

fn found(d: Detector, text: &str) -> Vec<&str> {
    let m = Matcher::new(d).unwrap();
    m.find_all(text).into_iter().map(|r| &text[r]).collect()
}

fn finds(d: Detector, text: &str, expected: &str) {
    assert_eq!(found(d, text), vec![expected], "{d:?} in {text:?}");
}

fn none(d: Detector, text: &str) {
    assert!(
        found(d, text).is_empty(),
        "{d:?} found {:?} in {text:?}",
        found(d, text)
    );
}

#[test]
fn every_detector_compiles_and_names_itself() {
    for d in Detector::ALL {
        Matcher::new(d).unwrap();
        assert_eq!(Detector::parse(d.as_str()), Some(d));
        assert!(d.max_match_bytes() >= 20, "{d:?}");
        assert!(!d.label().is_empty());
    }
    assert_eq!(Detector::parse("ssn"), None);
}

#[test]
fn email_addresses_and_their_edge_cases() {
    finds(
        Detector::Email,
        "write to bob@example.com today",
        "bob@example.com",
    );
    finds(
        Detector::Email,
        "<first.last+tag@mail.sub.example.co.uk>",
        "first.last+tag@mail.sub.example.co.uk",
    );
    finds(
        Detector::Email,
        "Mail: A_B%c@Example.ORG.",
        "A_B%c@Example.ORG",
    );
    finds(Detector::Email, "x a@b.io", "a@b.io");
    none(Detector::Email, "user@localhost is not routable");
    none(Detector::Email, "a@b.c has a one-letter top-level domain");
    none(Detector::Email, "@example.com has no local part");
    none(Detector::Email, ".bob@example.com starts with a dot");
    none(Detector::Email, "bob.@example.com ends with a dot");
    none(Detector::Email, "bo..b@example.com doubles a dot");
    none(
        Detector::Email,
        "bob@-example.com starts a label with a dash",
    );
    none(Detector::Email, "version 1.2@3.4 is not an address");
    assert!(valid_email("a@b.co"));
    assert!(!valid_email("no-at-sign"));
    assert!(!valid_email(&format!("{}@b.co", "a".repeat(65))));
    assert!(!valid_email(&format!("a@{}.co", "b".repeat(252))));
    assert!(valid_email(&format!("{}@b.co", "a".repeat(64))));
}

#[test]
fn phone_numbers_in_international_and_national_shapes() {
    finds(
        Detector::Phone,
        "call +1 212 555 0100 now",
        "+1 212 555 0100",
    );
    finds(
        Detector::Phone,
        "call +44 (20) 7946-0958.",
        "+44 (20) 7946-0958",
    );
    finds(Detector::Phone, "office (212) 555-0100", "(212) 555-0100");
    finds(Detector::Phone, "office 212-555-0100", "212-555-0100");
    finds(Detector::Phone, "Berlin 030 1234 5678", "030 1234 5678");
    none(Detector::Phone, "order 2125550100 shipped");
    none(Detector::Phone, "on 2024-01-15 at 10:30");
    none(Detector::Phone, "ip 192.168.100.200");
    none(Detector::Phone, "+1 555 01 is too short");
    none(Detector::Phone, "+1 2345 6789 0123 4567 89 is too long");
    none(Detector::Phone, "id A212-555-0100");
    // The unbalanced parenthesis is left out; the number after it stands alone.
    finds(
        Detector::Phone,
        "(212 555-0100 is unbalanced",
        "212 555-0100",
    );
    none(Detector::Phone, "+1 212--555 0100 doubles a separator");
}

#[test]
fn card_numbers_need_a_valid_luhn_digit_and_a_known_issuer() {
    finds(
        Detector::Card,
        "card 4111 1111 1111 1111 exp",
        "4111 1111 1111 1111",
    );
    finds(
        Detector::Card,
        "card 4111-1111-1111-1111.",
        "4111-1111-1111-1111",
    );
    finds(Detector::Card, "amex 378282246310005", "378282246310005");
    finds(Detector::Card, "mc 5555555555554444", "5555555555554444");
    finds(
        Detector::Card,
        "card 4111 1111 1111 1111 2024",
        "4111 1111 1111 1111",
    );
    none(Detector::Card, "card 4111 1111 1111 1112 fails Luhn");
    none(Detector::Card, "9111111111111111 has no issuer");
    none(Detector::Card, "4111-1111 1111-1111 mixes separators");
    none(Detector::Card, "order 41111111111111110000000 is too long");
    none(Detector::Card, "id x4111111111111111");
    assert!(luhn(&[4, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]));
    assert!(!luhn(&[4, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2]));
    assert!(!luhn(&[]));
    assert!(luhn(&[0]));
    assert!(luhn(&[1, 8]));
    assert!(luhn(&[5, 9]));
    assert!(!valid_card("4111 1111 111"));
    assert!(valid_card("6011111111111117"));
    assert!(valid_card("3530111333300000"));
    assert!(valid_card("30569309025904"));
    assert!(valid_card("6200000000000005"));
}

#[test]
fn ibans_need_their_mod_97_checksum() {
    finds(
        Detector::Iban,
        "pay DE89 3704 0044 0532 0130 00 by Friday",
        "DE89 3704 0044 0532 0130 00",
    );
    finds(
        Detector::Iban,
        "to GB82WEST12345698765432.",
        "GB82WEST12345698765432",
    );
    finds(
        Detector::Iban,
        "pay DE89 3704 0044 0532 0130 00 AND",
        "DE89 3704 0044 0532 0130 00",
    );
    none(
        Detector::Iban,
        "pay DE88 3704 0044 0532 0130 00 (bad checksum)",
    );
    none(Detector::Iban, "GB82WEST1234 is too short");
    assert!(valid_iban("NL91ABNA0417164300"));
    assert!(!valid_iban("NL91ABNA0417164301"));
    assert!(!valid_iban("NL91ABNA041716430!"));
    assert!(!valid_iban(&format!("DE89{}", "1".repeat(40))));
}

#[test]
fn api_keys_of_the_major_providers() {
    let openai = "sk-proj-AbCdEf0123456789GhIjKl0123";
    finds(Detector::OpenaiKey, &format!("key={openai};"), openai);
    finds(
        Detector::OpenaiKey,
        "use sk-abcdefghij0123456789klmn",
        "sk-abcdefghij0123456789klmn",
    );
    none(Detector::OpenaiKey, "task-abcdefghij0123456789klmn");
    none(
        Detector::OpenaiKey,
        "sk-this-is-only-a-long-hyphenated-name",
    );
    none(Detector::OpenaiKey, "sk-ant-api03-abcdefghij0123456789klmn");
    let anthropic = "sk-ant-api03-abcdefghij0123456789klmn";
    finds(Detector::AnthropicKey, &format!("x {anthropic}"), anthropic);
    none(
        Detector::AnthropicKey,
        "sk-ant-only-words-here-and-nothing-more",
    );
    finds(
        Detector::AwsAccessKey,
        "id AKIAIOSFODNN7EXAMPLE.",
        "AKIAIOSFODNN7EXAMPLE",
    );
    finds(
        Detector::AwsAccessKey,
        "id ASIAIOSFODNN7EXAMPL3",
        "ASIAIOSFODNN7EXAMPL3",
    );
    none(Detector::AwsAccessKey, "AKIAABCDEFGHIJKLMNOP has no digit");
    none(Detector::AwsAccessKey, "XAKIAIOSFODNN7EXAMPLE");
    none(Detector::AwsAccessKey, "AKIAIOSFODNN7EXAMPLEX");
    let google = format!("AIza{}", "Sy0123456789abcdefghijABCDEFGHIJ_-x");
    finds(Detector::GoogleApiKey, &format!("k={google}&"), &google);
    none(Detector::GoogleApiKey, "AIzaShort");
    let github = format!("ghp_{}", "a1".repeat(18));
    finds(Detector::GithubToken, &format!("token {github}"), &github);
    let fine = format!("github_pat_{}", "B2".repeat(41));
    finds(Detector::GithubToken, &format!("token {fine}"), &fine);
    none(Detector::GithubToken, "ghp_tooshort");
    finds(
        Detector::SlackToken,
        "xoxb-1234-5678-abcdefgh",
        "xoxb-1234-5678-abcdefgh",
    );
    none(Detector::SlackToken, "xoxz-1234-5678-abcdefgh");
}

#[test]
fn private_keys_from_their_begin_line_to_their_end_line() {
    let key = "-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf\n-----END RSA PRIVATE KEY-----";
    finds(Detector::PrivateKey, &format!("here:\n{key}\nthanks"), key);
    let cut = "-----BEGIN PRIVATE KEY-----\nMIIBOgIBAAJBAKj34G+/=\n";
    finds(
        Detector::PrivateKey,
        &format!("{cut}-- the rest is lost"),
        cut,
    );
    none(
        Detector::PrivateKey,
        "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----",
    );
    let far = format!(
        "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----",
        "A".repeat(9000)
    );
    let got = found(Detector::PrivateKey, &far);
    assert_eq!(got.len(), 1);
    assert!(got[0].len() <= Detector::PrivateKey.max_match_bytes());
}

#[test]
fn detector_names_parse_with_api_keys_standing_for_all_six() {
    let all = parse_detectors(&["email", "api_keys", "email"]).unwrap();
    assert_eq!(all.len(), 7);
    assert!(all.contains(&Detector::SlackToken));
    let err = parse_detectors(&["email", "ssn"]).unwrap_err();
    assert!(err.starts_with("unknown detector \"ssn\""), "{err}");
}

#[test]
fn findings_of_a_detector_never_exceed_its_longest_match() {
    let text = format!(
        "{}@{}.com and +1 {} and sk-{}",
        "a".repeat(100),
        "b".repeat(300),
        "1 ".repeat(40),
        "x1".repeat(300)
    );
    for d in Detector::ALL {
        for f in found(d, &text) {
            assert!(f.len() <= d.max_match_bytes(), "{d:?}: {}", f.len());
        }
    }
}

#[test]
fn user_patterns_compile_with_the_regex_error_as_the_message() {
    assert!(compile_pattern("EMP-[0-9]{6}")
        .unwrap()
        .is_match("EMP-123456"));
    let err = compile_pattern("(").unwrap_err().to_string();
    assert!(err.contains("unclosed group"), "{err}");
    let huge = compile_pattern(r"\w{1000}\w{1000}\w{1000}")
        .unwrap_err()
        .to_string();
    assert!(huge.contains("size limit"), "{huge}");
}
