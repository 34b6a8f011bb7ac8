//! The answers that score what they are sent rather than generate text: OpenAI's moderations
//! (`/v1/moderations`) and the rerank shape Cohere, Jina and vLLM share (`/v1/rerank`). Both
//! read the request body themselves and answer deterministically: the same body always gets the
//! same scores, so tests and demos can assert them.

use serde_json::{json, Map, Value};

use crate::answer::estimate_tokens;
use crate::wire::next_id;

/// The model a moderations answer names when the request gives none (OpenAI's default).
pub const DEFAULT_MODERATION_MODEL: &str = "omni-moderation-latest";

/// OpenAI's moderation categories, in its order.
pub const MODERATION_CATEGORIES: [&str; 13] = [
    "harassment",
    "harassment/threatening",
    "hate",
    "hate/threatening",
    "illicit",
    "illicit/violent",
    "self-harm",
    "self-harm/instructions",
    "self-harm/intent",
    "sexual",
    "sexual/minors",
    "violence",
    "violence/graphic",
];

/// The words that flag a text in the simulation, by category: a text containing one of them
/// (case-insensitively) is flagged for that category with a score of 0.9; every other score is
/// 0.0001.
const TRIGGERS: [(&str, &[&str]); 3] = [
    ("harassment", &["idiot", "stupid"]),
    ("self-harm", &["hurt myself"]),
    ("violence", &["kill", "murder", "attack"]),
];

const FLAGGED_SCORE: f64 = 0.9;
const CLEAR_SCORE: f64 = 0.0001;

/// What one moderation result is about: its text (all text parts joined) and whether it had an
/// image.
struct ModerationInput {
    text: String,
    image: bool,
}

/// The inputs of a moderations request: a string is one; a list of strings one each; a list of
/// multi-modal parts (`{"type":"text","text":...}`, `{"type":"image_url",...}`) one altogether,
/// as OpenAI answers them.
fn moderation_inputs(request: &Value) -> Vec<ModerationInput> {
    let text_input = |text: &str| ModerationInput {
        text: text.to_owned(),
        image: false,
    };
    match request.get("input") {
        Some(Value::String(text)) => vec![text_input(text)],
        Some(Value::Array(items)) if items.iter().all(Value::is_string) && !items.is_empty() => {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(text_input)
                .collect()
        }
        Some(Value::Array(parts)) => {
            let text: Vec<&str> = parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            let image = parts
                .iter()
                .any(|p| p.get("type").and_then(Value::as_str) == Some("image_url"));
            vec![ModerationInput {
                text: text.join(" "),
                image,
            }]
        }
        _ => vec![text_input("")],
    }
}

/// A moderations answer (`modr-mock-N`) for `request`, the request's JSON body (the model it
/// names, else [`DEFAULT_MODERATION_MODEL`]; `model` when given overrides both): one result per
/// input, each with every category, its score and the input types it applied to (`text`, plus
/// `image` for a request with an image part).
pub fn moderation_json(model: Option<&str>, request: &Value) -> String {
    let model = model
        .or_else(|| request.get("model").and_then(Value::as_str))
        .unwrap_or(DEFAULT_MODERATION_MODEL);
    let results: Vec<Value> = moderation_inputs(request)
        .iter()
        .map(moderation_result)
        .collect();
    json!({"id": format!("modr-mock-{}", next_id()), "model": model, "results": results})
        .to_string()
}

fn moderation_result(input: &ModerationInput) -> Value {
    let lower = input.text.to_lowercase();
    let hit = |category: &str| {
        TRIGGERS
            .iter()
            .any(|(c, words)| *c == category && words.iter().any(|w| lower.contains(w)))
    };
    let (mut categories, mut scores, mut applied) = (Map::new(), Map::new(), Map::new());
    let mut types = vec![json!("text")];
    if input.image {
        types.push(json!("image"));
    }
    for category in MODERATION_CATEGORIES {
        let flagged = hit(category);
        categories.insert(category.to_owned(), json!(flagged));
        let score = if flagged { FLAGGED_SCORE } else { CLEAR_SCORE };
        scores.insert(category.to_owned(), json!(score));
        applied.insert(category.to_owned(), Value::Array(types.clone()));
    }
    let flagged = categories.values().any(|v| v == &Value::Bool(true));
    json!({
        "flagged": flagged,
        "categories": categories,
        "category_scores": scores,
        "category_applied_input_types": applied,
    })
}

/// A document's text: the string itself, or an object's `text`.
fn document_text(document: &Value) -> &str {
    match document {
        Value::String(text) => text,
        other => other.get("text").and_then(Value::as_str).unwrap_or(""),
    }
}

/// The lowercase words of `text` (letters and digits).
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// A document's relevance to the query's words: the share of them it contains, scaled into
/// (0, 1), less a little per place so that ties keep the documents' order.
fn relevance(query: &[String], document: &str, index: usize) -> f64 {
    let doc = words(document);
    let shared = query.iter().filter(|w| doc.contains(w)).count();
    let share = if query.is_empty() {
        0.0
    } else {
        shared as f64 / query.len() as f64
    };
    0.05 + 0.9 * share - 0.001 * (index.min(40) as f64)
}

/// A rerank answer (the shape of Cohere's, Jina's and vLLM's) for `request`, the request's JSON
/// body:
/// `results`, most relevant first, each with the document's `index` and its `relevance_score`
/// (the share of the query's words it contains), at most `top_n` of them, each with its
/// `document` unless `return_documents` is `false`; and `usage.total_tokens` (an estimate of
/// the query's and the documents' tokens), as vLLM and Jina report it. `model` when given
/// overrides the body's.
pub fn rerank_json(model: Option<&str>, request: &Value) -> String {
    let model = model
        .or_else(|| request.get("model").and_then(Value::as_str))
        .unwrap_or("");
    let query = request.get("query").and_then(Value::as_str).unwrap_or("");
    let documents: &[Value] = request
        .get("documents")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let top_n = request
        .get("top_n")
        .and_then(Value::as_u64)
        .map_or(documents.len(), |n| {
            usize::try_from(n).unwrap_or(usize::MAX)
        });
    let return_documents = request.get("return_documents") != Some(&Value::Bool(false));
    let query_words = words(query);
    let mut scored: Vec<(usize, f64)> = documents
        .iter()
        .enumerate()
        .map(|(i, d)| (i, relevance(&query_words, document_text(d), i)))
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let results: Vec<Value> = scored
        .into_iter()
        .take(top_n)
        .map(|(index, score)| {
            let mut result = json!({"index": index, "relevance_score": score});
            if return_documents {
                result["document"] = json!({"text": document_text(&documents[index])});
            }
            result
        })
        .collect();
    let tokens = estimate_tokens(query)
        + documents
            .iter()
            .map(|d| estimate_tokens(document_text(d)))
            .sum::<u64>();
    json!({
        "id": format!("rerank-mock-{}", next_id()),
        "model": model,
        "results": results,
        "usage": {"total_tokens": tokens},
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code

    use super::*;

    fn parse(s: &str) -> Value {
        serde_json::from_str(s).unwrap()
    }

    fn body(b: &[u8]) -> Value {
        serde_json::from_slice(b).unwrap()
    }

    #[test]
    fn a_moderation_has_one_result_per_text_with_every_category() {
        let answer = parse(&moderation_json(
            None,
            &body(br#"{"input":["a calm day","I will kill it"]}"#),
        ));
        assert_eq!(answer["model"], DEFAULT_MODERATION_MODEL);
        assert!(answer["id"].as_str().unwrap().starts_with("modr-"));
        let results = answer["results"].as_array().unwrap();
        assert_eq!(results.len(), 2);
        for result in results {
            for category in MODERATION_CATEGORIES {
                assert!(result["categories"][category].is_boolean(), "{category}");
                assert!(result["category_scores"][category].is_f64(), "{category}");
                assert_eq!(
                    result["category_applied_input_types"][category],
                    json!(["text"])
                );
            }
        }
        assert_eq!(results[0]["flagged"], false);
        assert_eq!(results[1]["flagged"], true);
        assert_eq!(results[1]["categories"]["violence"], true);
        assert_eq!(results[1]["categories"]["hate"], false);
        assert_eq!(results[1]["category_scores"]["violence"], FLAGGED_SCORE);
    }

    #[test]
    fn a_moderation_names_the_requested_model_and_takes_parts_as_one_input() {
        let request = body(br#"{"model":"text-moderation-stable","input":[{"type":"text","text":"you idiot"},{"type":"image_url","image_url":{"url":"data:,"}}]}"#);
        let answer = parse(&moderation_json(None, &request));
        assert_eq!(answer["model"], "text-moderation-stable");
        let results = answer["results"].as_array().unwrap();
        assert_eq!(results.len(), 1);
        assert_eq!(results[0]["categories"]["harassment"], true);
        assert_eq!(
            results[0]["category_applied_input_types"]["violence"],
            json!(["text", "image"])
        );
        let named = parse(&moderation_json(Some("up"), &request));
        assert_eq!(named["model"], "up");
    }

    #[test]
    fn a_rerank_orders_documents_by_the_query_words_they_contain() {
        let request = body(br#"{"model":"r","query":"capital of France","documents":["Berlin is in Germany",{"text":"Paris is the capital of France"},"France has wine"],"top_n":2}"#);
        let answer = parse(&rerank_json(None, &request));
        assert_eq!(answer["model"], "r");
        let results = answer["results"].as_array().unwrap();
        assert_eq!(results.len(), 2, "top_n");
        assert_eq!(results[0]["index"], 1);
        assert_eq!(results[1]["index"], 2);
        assert_eq!(
            results[0]["document"]["text"],
            "Paris is the capital of France"
        );
        let (a, b) = (
            results[0]["relevance_score"].as_f64().unwrap(),
            results[1]["relevance_score"].as_f64().unwrap(),
        );
        assert!(a > b && b > 0.0 && a < 1.0, "{a} {b}");
        assert!(answer["usage"]["total_tokens"].as_u64().unwrap() > 0);
        // The same request gets the same scores.
        let again = parse(&rerank_json(None, &request));
        assert_eq!(again["results"], answer["results"]);
    }

    #[test]
    fn a_rerank_leaves_documents_out_when_asked_and_ranks_all_without_top_n() {
        let request = body(
            br#"{"model":"r","query":"q","documents":["a","b","c"],"return_documents":false}"#,
        );
        let answer = parse(&rerank_json(Some("up"), &request));
        assert_eq!(answer["model"], "up");
        let results = answer["results"].as_array().unwrap();
        let indexes: Vec<u64> = results
            .iter()
            .map(|r| r["index"].as_u64().unwrap())
            .collect();
        assert_eq!(indexes, [0, 1, 2], "ties keep the documents' order");
        assert!(results.iter().all(|r| r.get("document").is_none()));
    }
}
