//! The provider catalog: data, not logic.
//!
//! - [`PRESETS`]: named providers a channel may give as `preset` instead of spelling out its
//!   `provider`, `base_url` and quirks. Most speak OpenAI's protocol. Explicit channel fields win
//!   over what a preset supplies.
//! - [`PRICES`]: built-in prices of the providers' popular models, each dated and with the
//!   provider's published pricing page it was read from. A channel's usage falls back on them
//!   (the setting `price_catalog`) when the operator's own prices have no entry for the model;
//!   the operator's prices always win.
//!
//! Both tables are reference data for docs/src/reference/providers.md; a unit test checks every
//! entry (dated, sourced, patterns valid, no duplicates).

use serde::Serialize;

use crate::ids::ChannelId;
use crate::limit::Price;
use crate::pattern::validate_pattern;

/// How a preset's upstream is authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Auth {
    /// An API key, sent in the provider's header (`Authorization: Bearer` for OpenAI's
    /// protocol). The channel needs at least one credential.
    Key,
    /// A local server that checks no key (unless started with one): the channel may give no
    /// credential, and then sends the placeholder [`NO_KEY`], which such a server ignores.
    None,
}

/// The credential a channel of an [`Auth::None`] preset sends when it gives none.
pub const NO_KEY: &str = "no-key";

/// A named provider: what a channel with `preset: <name>` gets unless it says otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Preset {
    pub name: &'static str,
    /// The protocol spoken, as a channel's `provider` names it (most presets: `openai`).
    pub provider: &'static str,
    /// The default `base_url`.
    pub base_url: &'static str,
    pub auth: Auth,
    /// Whether the upstream has OpenAI's Responses API (`/v1/responses`); `false`: Responses
    /// requests reach it translated into Chat Completions, which every OpenAI-compatible
    /// server has.
    pub responses_api: bool,
    /// Known quirks the gateway has no switch for, for the operator to know.
    pub notes: &'static str,
}

const fn openai_compatible(
    name: &'static str,
    base_url: &'static str,
    auth: Auth,
    notes: &'static str,
) -> Preset {
    Preset {
        name,
        provider: "openai",
        base_url,
        auth,
        responses_api: false,
        notes,
    }
}

/// The presets, by name.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "openai",
        provider: "openai",
        base_url: "https://api.openai.com/v1",
        auth: Auth::Key,
        responses_api: true,
        notes: "",
    },
    Preset {
        name: "anthropic",
        provider: "anthropic",
        base_url: "https://api.anthropic.com",
        auth: Auth::Key,
        responses_api: true,
        notes: "",
    },
    Preset {
        name: "gemini",
        provider: "gemini",
        base_url: "https://generativelanguage.googleapis.com/v1beta",
        auth: Auth::Key,
        responses_api: true,
        notes: "",
    },
    openai_compatible(
        "groq",
        "https://api.groq.com/openai/v1",
        Auth::Key,
        "Chat Completions; some OpenAI fields (logprobs, n > 1) are refused by the upstream",
    ),
    openai_compatible(
        "together",
        "https://api.together.xyz/v1",
        Auth::Key,
        "Chat Completions; model names are the upstream's (e.g. meta-llama/...)",
    ),
    openai_compatible(
        "fireworks",
        "https://api.fireworks.ai/inference/v1",
        Auth::Key,
        "Chat Completions; model names are accounts/fireworks/models/...",
    ),
    openai_compatible(
        "deepseek",
        "https://api.deepseek.com/v1",
        Auth::Key,
        "Chat Completions; cache hits are reported as prompt_cache_hit_tokens: unless the \
         answer also gives OpenAI's cached_tokens, they are priced as ordinary input",
    ),
    openai_compatible(
        "mistral",
        "https://api.mistral.ai/v1",
        Auth::Key,
        "Chat Completions; OpenAI-only fields may be refused by the upstream",
    ),
    openai_compatible("xai", "https://api.x.ai/v1", Auth::Key, "Chat Completions"),
    openai_compatible(
        "openrouter",
        "https://openrouter.ai/api/v1",
        Auth::Key,
        "Chat Completions; model names are provider/model (e.g. openai/gpt-4o); prices vary \
         per route, so the catalog has none",
    ),
    openai_compatible(
        "ollama",
        "http://127.0.0.1:11434/v1",
        Auth::None,
        "local server; Chat Completions",
    ),
    openai_compatible(
        "vllm",
        "http://127.0.0.1:8000/v1",
        Auth::None,
        "local server; a key is needed only when it was started with --api-key",
    ),
    openai_compatible(
        "lmstudio",
        "http://127.0.0.1:1234/v1",
        Auth::None,
        "local server; Chat Completions",
    ),
];

/// The preset named `name`.
pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// The preset names, comma-separated (for error messages).
pub fn preset_names() -> String {
    PRESETS
        .iter()
        .map(|p| p.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The preset whose catalog prices apply to a channel: its own `preset`, else the preset whose
/// `provider` and default `base_url` it has (a channel written out in full to
/// `https://api.openai.com/v1` is OpenAI's).
pub fn price_family(
    preset_name: Option<&str>,
    provider: &str,
    base_url: &str,
) -> Option<&'static Preset> {
    if let Some(name) = preset_name {
        return preset(name);
    }
    let url = base_url.trim_end_matches('/');
    PRESETS
        .iter()
        .find(|p| p.provider == provider && p.base_url == url)
}

/// A built-in price, in micro-USD per million tokens (as [`Price`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CatalogPrice {
    /// The preset it applies to.
    pub preset: &'static str,
    /// The upstream model (`*`/`?` wildcards; the most specific match wins).
    pub model_pattern: &'static str,
    pub input_per_million: u64,
    pub output_per_million: u64,
    /// Cache-read input; `None`: not published, so cached tokens are charged as other input.
    pub cached_input_per_million: Option<u64>,
    /// The date the source gave this price for (`YYYY-MM-DD`).
    pub as_of: &'static str,
    /// The provider's published pricing page.
    pub source: &'static str,
}

/// The day the catalog was last compiled; each entry also carries the date of its own source.
pub const CATALOG_DATE: &str = "2026-12-06";

const OPENAI: &str = "https://platform.openai.com/docs/pricing";
const ANTHROPIC: &str = "https://platform.claude.com/docs/en/about-claude/pricing";
const GEMINI: &str = "https://ai.google.dev/gemini-api/docs/pricing";
const DEEPSEEK: &str = "https://api-docs.deepseek.com/quick_start/pricing";
const GROQ: &str = "https://groq.com/pricing";

const fn price(
    preset: &'static str,
    model_pattern: &'static str,
    (input, cached, output): (u64, Option<u64>, u64),
    as_of: &'static str,
    source: &'static str,
) -> CatalogPrice {
    CatalogPrice {
        preset,
        model_pattern,
        input_per_million: input,
        output_per_million: output,
        cached_input_per_million: cached,
        as_of,
        source,
    }
}

/// USD per million tokens × 10⁶: `usd(2, 500_000)` is $2.50.
const fn usd(whole: u64, micros: u64) -> u64 {
    whole * 1_000_000 + micros
}

/// The built-in prices: (input, cached input, output) per million tokens. Only what the
/// providers' pages published; a model left out stays unpriced unless the operator prices it.
/// Tiered prices (a higher rate above some prompt length) are given at their first tier. A
/// model's dated snapshots (`gpt-4o-2024-08-06`) share its price; its variants (`-audio`,
/// `-realtime`, `-pro`) are priced differently and are left out.
#[rustfmt::skip]
pub const PRICES: &[CatalogPrice] = &[
    // OpenAI.
    price("openai", "gpt-5.4", (usd(2, 500_000), Some(usd(0, 250_000)), usd(15, 0)), "2026-06-01", OPENAI),
    price("openai", "gpt-5.4-20*", (usd(2, 500_000), Some(usd(0, 250_000)), usd(15, 0)), "2026-06-01", OPENAI),
    price("openai", "gpt-5.4-mini", (usd(0, 750_000), Some(usd(0, 75_000)), usd(4, 500_000)), "2026-06-01", OPENAI),
    price("openai", "gpt-5.4-mini-20*", (usd(0, 750_000), Some(usd(0, 75_000)), usd(4, 500_000)), "2026-06-01", OPENAI),
    price("openai", "gpt-5.4-nano", (usd(0, 200_000), Some(usd(0, 20_000)), usd(1, 250_000)), "2026-06-01", OPENAI),
    price("openai", "gpt-5.4-nano-20*", (usd(0, 200_000), Some(usd(0, 20_000)), usd(1, 250_000)), "2026-06-01", OPENAI),
    price("openai", "gpt-5", (usd(1, 250_000), Some(usd(0, 125_000)), usd(10, 0)), "2025-08-07", OPENAI),
    price("openai", "gpt-5-20*", (usd(1, 250_000), Some(usd(0, 125_000)), usd(10, 0)), "2025-08-07", OPENAI),
    price("openai", "gpt-5-mini", (usd(0, 250_000), Some(usd(0, 25_000)), usd(2, 0)), "2025-08-07", OPENAI),
    price("openai", "gpt-5-mini-20*", (usd(0, 250_000), Some(usd(0, 25_000)), usd(2, 0)), "2025-08-07", OPENAI),
    price("openai", "gpt-4.1", (usd(2, 0), Some(usd(0, 500_000)), usd(8, 0)), "2026-06-21", OPENAI),
    price("openai", "gpt-4.1-20*", (usd(2, 0), Some(usd(0, 500_000)), usd(8, 0)), "2026-06-21", OPENAI),
    price("openai", "gpt-4.1-mini", (usd(0, 400_000), Some(usd(0, 100_000)), usd(1, 600_000)), "2026-06-21", OPENAI),
    price("openai", "gpt-4.1-mini-20*", (usd(0, 400_000), Some(usd(0, 100_000)), usd(1, 600_000)), "2026-06-21", OPENAI),
    price("openai", "gpt-4o", (usd(2, 500_000), Some(usd(1, 250_000)), usd(10, 0)), "2026-05-01", OPENAI),
    price("openai", "gpt-4o-20*", (usd(2, 500_000), Some(usd(1, 250_000)), usd(10, 0)), "2026-05-01", OPENAI),
    price("openai", "gpt-4o-mini", (usd(0, 150_000), Some(usd(0, 75_000)), usd(0, 600_000)), "2026-05-01", OPENAI),
    price("openai", "gpt-4o-mini-20*", (usd(0, 150_000), Some(usd(0, 75_000)), usd(0, 600_000)), "2026-05-01", OPENAI),
    // Anthropic (cache hits at a tenth of base input).
    price("anthropic", "claude-opus-4-5*", (usd(5, 0), Some(usd(0, 500_000)), usd(25, 0)), CATALOG_DATE, ANTHROPIC),
    price("anthropic", "claude-opus-4-6*", (usd(5, 0), Some(usd(0, 500_000)), usd(25, 0)), CATALOG_DATE, ANTHROPIC),
    price("anthropic", "claude-opus-4-7*", (usd(5, 0), Some(usd(0, 500_000)), usd(25, 0)), CATALOG_DATE, ANTHROPIC),
    price("anthropic", "claude-opus-4-1*", (usd(15, 0), Some(usd(1, 500_000)), usd(75, 0)), CATALOG_DATE, ANTHROPIC),
    price("anthropic", "claude-opus-4-0", (usd(15, 0), Some(usd(1, 500_000)), usd(75, 0)), CATALOG_DATE, ANTHROPIC),
    price("anthropic", "claude-opus-4-20*", (usd(15, 0), Some(usd(1, 500_000)), usd(75, 0)), CATALOG_DATE, ANTHROPIC),
    price("anthropic", "claude-sonnet-5", (usd(2, 0), Some(usd(0, 200_000)), usd(10, 0)), CATALOG_DATE, ANTHROPIC),
    price("anthropic", "claude-sonnet-4-6*", (usd(3, 0), Some(usd(0, 300_000)), usd(15, 0)), CATALOG_DATE, ANTHROPIC),
    price("anthropic", "claude-sonnet-4-5*", (usd(3, 0), Some(usd(0, 300_000)), usd(15, 0)), CATALOG_DATE, ANTHROPIC),
    price("anthropic", "claude-sonnet-4-0", (usd(3, 0), Some(usd(0, 300_000)), usd(15, 0)), CATALOG_DATE, ANTHROPIC),
    price("anthropic", "claude-sonnet-4-20*", (usd(3, 0), Some(usd(0, 300_000)), usd(15, 0)), CATALOG_DATE, ANTHROPIC),
    price("anthropic", "claude-haiku-4-5*", (usd(1, 0), Some(usd(0, 100_000)), usd(5, 0)), CATALOG_DATE, ANTHROPIC),
    price("anthropic", "claude-3-5-haiku*", (usd(0, 800_000), Some(usd(0, 80_000)), usd(4, 0)), CATALOG_DATE, ANTHROPIC),
    price("anthropic", "claude-3-haiku*", (usd(0, 250_000), Some(usd(0, 30_000)), usd(1, 250_000)), CATALOG_DATE, ANTHROPIC),
    // Google Gemini (Developer API, standard tier; 2.5 Pro at its first tier, prompts up to
    // 200k tokens).
    price("gemini", "gemini-2.5-pro", (usd(1, 250_000), None, usd(10, 0)), "2026-03-01", GEMINI),
    price("gemini", "gemini-2.5-flash", (usd(0, 300_000), None, usd(2, 500_000)), "2026-03-01", GEMINI),
    price("gemini", "gemini-2.5-flash-lite", (usd(0, 100_000), None, usd(0, 400_000)), "2026-01-01", GEMINI),
    // DeepSeek.
    price("deepseek", "deepseek-chat", (usd(0, 560_000), Some(usd(0, 70_000)), usd(1, 680_000)), "2025-09-05", DEEPSEEK),
    price("deepseek", "deepseek-reasoner", (usd(0, 560_000), Some(usd(0, 70_000)), usd(1, 680_000)), "2025-09-05", DEEPSEEK),
    // Groq.
    price("groq", "openai/gpt-oss-120b", (usd(0, 150_000), Some(usd(0, 75_000)), usd(0, 600_000)), "2026-06-04", GROQ),
];

/// `family`'s catalog prices as the prices of channel `channel`. Ids are negative (never an
/// operator price's) and stable: `-(1 + position in PRICES)`.
pub fn prices_for_channel(family: &Preset, channel: ChannelId) -> impl Iterator<Item = Price> + '_ {
    PRICES
        .iter()
        .enumerate()
        .filter(move |(_, p)| p.preset == family.name)
        .map(move |(i, p)| Price {
            // An index of a short constant table always fits; `MIN` is never an id.
            id: i64::try_from(i).map_or(i64::MIN, |i| -1 - i),
            channel_id: channel,
            model_pattern: p.model_pattern.to_owned(),
            input_per_million: p.input_per_million,
            output_per_million: p.output_per_million,
            cached_input_per_million: p.cached_input_per_million,
        })
}

/// Every problem of the catalog, one line each (empty: sound). Checked by a unit test.
pub fn problems() -> Vec<String> {
    problems_of(PRESETS, PRICES)
}

/// Every problem of `presets` and `prices` as a catalog, one line each.
fn problems_of(presets: &[Preset], prices: &[CatalogPrice]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, p) in presets.iter().enumerate() {
        if presets[..i].iter().any(|q| q.name == p.name) {
            out.push(format!("preset {} is listed twice", p.name));
        }
        if !(p.base_url.starts_with("http://") || p.base_url.starts_with("https://"))
            || p.base_url.ends_with('/')
        {
            out.push(format!("preset {}: base_url {:?}", p.name, p.base_url));
        }
    }
    for (i, p) in prices.iter().enumerate() {
        let at = format!("price {} {}", p.preset, p.model_pattern);
        if !presets.iter().any(|q| q.name == p.preset) {
            out.push(format!("{at}: no such preset"));
        }
        if let Err(e) = validate_pattern(p.model_pattern) {
            out.push(format!("{at}: {e}"));
        }
        if prices[..i]
            .iter()
            .any(|q| q.preset == p.preset && q.model_pattern == p.model_pattern)
        {
            out.push(format!("{at}: listed twice"));
        }
        if !is_date(p.as_of) || p.as_of > CATALOG_DATE {
            out.push(format!("{at}: as_of {:?}", p.as_of));
        }
        if !p.source.starts_with("https://") {
            out.push(format!("{at}: source {:?}", p.source));
        }
        if p.input_per_million == 0 || p.output_per_million == 0 {
            out.push(format!("{at}: a zero price"));
        }
        if p.cached_input_per_million
            .is_some_and(|c| c > p.input_per_million)
        {
            out.push(format!("{at}: cached input above input"));
        }
    }
    out
}

fn is_date(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::price_for;

    #[test]
    fn the_catalog_is_dated_sourced_valid_and_without_duplicates() {
        assert_eq!(problems(), Vec::<String>::new());
        assert!(is_date(CATALOG_DATE));
        assert!(!is_date("2026-1-011") && !is_date("2026/12/06"));
    }

    /// Each rule of the catalog's check, shown to bite on an entry that breaks it alone.
    #[test]
    fn the_catalog_check_names_every_kind_of_problem() {
        let good = |name, base_url| openai_compatible(name, base_url, Auth::Key, "");
        let presets = [
            good("a", "https://a.test/v1"),
            good("b", "http://b.test/v1"),
            good("a", "https://again.test/v1"),
            good("c", "ftp://c.test/v1"),
            good("d", "https://d.test/v1/"),
        ];
        let ok = |pattern| {
            price(
                "a",
                pattern,
                (2, Some(2), 3),
                "2026-01-01",
                "https://a.test",
            )
        };
        let prices = [
            ok("m-1"),
            CatalogPrice {
                preset: "b",
                cached_input_per_million: None,
                ..ok("m-2")
            },
            CatalogPrice {
                preset: "z",
                ..ok("m-3")
            },
            ok("m-1"),
            CatalogPrice {
                as_of: "2026-1-011",
                ..ok("m-4")
            },
            CatalogPrice {
                as_of: "2099-01-01",
                ..ok("m-5")
            },
            CatalogPrice {
                source: "http://a.test",
                ..ok("m-6")
            },
            CatalogPrice {
                input_per_million: 0,
                cached_input_per_million: None,
                ..ok("m-7")
            },
            CatalogPrice {
                output_per_million: 0,
                ..ok("m-8")
            },
            CatalogPrice {
                cached_input_per_million: Some(3),
                ..ok("m-9")
            },
            CatalogPrice {
                model_pattern: "",
                ..ok("")
            },
        ];
        let found = problems_of(&presets, &prices);
        let expected = [
            "preset a is listed twice",
            "preset c: base_url \"ftp://c.test/v1\"",
            "preset d: base_url \"https://d.test/v1/\"",
            "price z m-3: no such preset",
            "price a m-1: listed twice",
            "price a m-4: as_of \"2026-1-011\"",
            "price a m-5: as_of \"2099-01-01\"",
            "price a m-6: source \"http://a.test\"",
            "price a m-7: a zero price",
            "price a m-8: a zero price",
            "price a m-9: cached input above input",
        ];
        for line in expected {
            assert!(found.iter().any(|f| f == line), "{line} not in {found:#?}");
        }
        // The one left: the empty pattern, in the pattern rules' own words.
        assert_eq!(found.len(), expected.len() + 1, "{found:#?}");
        assert!(
            found.iter().any(|f| f.starts_with("price a : ")),
            "{found:#?}"
        );
    }

    #[test]
    fn presets_are_found_by_name_and_listed() {
        let groq = preset("groq").unwrap();
        assert_eq!(groq.provider, "openai");
        assert_eq!(groq.base_url, "https://api.groq.com/openai/v1");
        assert!(preset("nope").is_none());
        assert!(preset_names().starts_with("openai, anthropic, gemini, groq"));
        assert!(preset_names().ends_with("ollama, vllm, lmstudio"));
    }

    #[test]
    fn a_channel_is_priced_by_its_preset_or_by_its_providers_default_url() {
        let family = |preset, provider, url| price_family(preset, provider, url).map(|p| p.name);
        assert_eq!(family(Some("groq"), "openai", "http://x"), Some("groq"));
        assert_eq!(
            family(Some("nope"), "openai", "https://api.openai.com/v1"),
            None
        );
        assert_eq!(
            family(None, "openai", "https://api.openai.com/v1/"),
            Some("openai")
        );
        assert_eq!(
            family(None, "openai", "https://api.groq.com/openai/v1"),
            Some("groq")
        );
        assert_eq!(family(None, "azure", "https://api.openai.com/v1"), None);
        assert_eq!(family(None, "openai", "http://vllm.internal/v1"), None);
    }

    #[test]
    fn the_most_specific_catalog_pattern_wins() {
        let openai = preset("openai").unwrap();
        let prices: Vec<Price> = prices_for_channel(openai, 7).collect();
        assert!(prices.iter().all(|p| p.channel_id == 7 && p.id < 0));
        let mini = price_for(&prices, 7, "gpt-4o-mini-2024-07-18").unwrap();
        assert_eq!(mini.input_per_million, 150_000);
        let full = price_for(&prices, 7, "gpt-4o-2024-08-06").unwrap();
        assert_eq!(full.input_per_million, 2_500_000);
        assert_eq!(
            price_for(&prices, 7, "gpt-5").unwrap().output_per_million,
            10_000_000
        );
        assert!(price_for(&prices, 7, "gpt-3.5-turbo").is_none());
        let gemini: Vec<Price> = prices_for_channel(preset("gemini").unwrap(), 1).collect();
        let lite = price_for(&gemini, 1, "gemini-2.5-flash-lite").unwrap();
        assert_eq!(lite.input_per_million, 100_000);
    }
}
