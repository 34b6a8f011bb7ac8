//! Stream translation rules, event-order validators and split-anywhere properties.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::*;
use crate::Protocol::{Anthropic as A, Gemini as G, OpenAi as O};

const OPENAI_TOOL_FIRST: &str = concat!(
    "data: {\"id\":\"chatcmpl-9\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"index\":0,\"id\":\"call_abc\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"chatcmpl-9\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"city\\\":\"}}]},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"chatcmpl-9\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"Paris\\\"}\"}}]},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"chatcmpl-9\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_def\",\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"arguments\":\"{}\"}}]},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"chatcmpl-9\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
    "data: {\"id\":\"chatcmpl-9\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[],\"usage\":{\"prompt_tokens\":50,\"completion_tokens\":10,\"total_tokens\":60,\"prompt_tokens_details\":{\"cached_tokens\":20}}}\n\n",
    "data: [DONE]\n\n",
);

const OPENAI_TEXT: &str = concat!(
    "data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}],\"usage\":null}\n\n",
    ": keep-alive\n\n",
    "data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"finish_reason\":null}],\"usage\":null}\n\n",
    "data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo \\u00e9\"},\"finish_reason\":null}],\"usage\":null}\n\n",
    "data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}],\"usage\":null}\n\n",
    "data: {\"id\":\"chatcmpl-1\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3,\"total_tokens\":12}}\n\n",
    "data: [DONE]\n\n",
);

const ANTHROPIC_TEXT_TOOL: &str = concat!(
    "event: message_start\n",
    "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":30,\"output_tokens\":1,\"cache_read_input_tokens\":70,\"cache_creation_input_tokens\":5}}}\n\n",
    "event: content_block_start\n",
    "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    "event: ping\n",
    "data: {\"type\": \"ping\"}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Let me check.\"}}\n\n",
    "event: content_block_stop\n",
    "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    "event: content_block_start\n",
    "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_01\",\"name\":\"get_weather\",\"input\":{}}}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"city\\\": \\\"Pa\"}}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"ris\\\"}\"}}\n\n",
    "event: content_block_stop\n",
    "data: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
    "event: message_delta\n",
    "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":25}}\n\n",
    "event: message_stop\n",
    "data: {\"type\":\"message_stop\"}\n\n",
);

const ANTHROPIC_THINKING_TEXT: &str = concat!(
    "event: message_start\r\n",
    "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_02\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\r\n\r\n",
    "event: content_block_start\r\n",
    "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\r\n\r\n",
    "event: content_block_delta\r\n",
    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"hmm\"}}\r\n\r\n",
    "event: content_block_stop\r\n",
    "data: {\"type\":\"content_block_stop\",\"index\":0}\r\n\r\n",
    "event: content_block_start\r\n",
    "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\r\n\r\n",
    "event: content_block_delta\r\n",
    "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Answer\"}}\r\n\r\n",
    "event: content_block_stop\r\n",
    "data: {\"type\":\"content_block_stop\",\"index\":1}\r\n\r\n",
    "event: message_delta\r\n",
    "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"stop_sequence\",\"stop_sequence\":\"END\"},\"usage\":{\"output_tokens\":7}}\r\n\r\n",
    "event: message_stop\r\n",
    "data: {\"type\":\"message_stop\"}\r\n\r\n",
);

const GEMINI_TEXT_TOOL: &str = concat!(
    "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hello\"}],\"role\":\"model\"},\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":40,\"candidatesTokenCount\":1,\"totalTokenCount\":41,\"cachedContentTokenCount\":32},\"modelVersion\":\"gemini-2.5-flash\",\"responseId\":\"r1\"}\r\n\r\n",
    "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"thinking...\",\"thought\":true},{\"text\":\" world\"}],\"role\":\"model\"},\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":40,\"candidatesTokenCount\":3,\"totalTokenCount\":43,\"cachedContentTokenCount\":32},\"responseId\":\"r1\"}\r\n\r\n",
    "data: {\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":{\"name\":\"get_weather\",\"args\":{\"city\":\"Paris\"}}}],\"role\":\"model\"},\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":40,\"candidatesTokenCount\":12,\"totalTokenCount\":52,\"cachedContentTokenCount\":32},\"responseId\":\"r1\"}\r\n\r\n",
);

const GEMINI_TOOL_ONLY: &str = "data: {\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":{\"id\":\"fc_1\",\"name\":\"lookup\",\"args\":{\"q\":\"x\"}}}],\"role\":\"model\"},\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":5,\"candidatesTokenCount\":2,\"totalTokenCount\":7},\"responseId\":\"r2\"}\n\n";

fn run(
    up: Protocol,
    client: Protocol,
    stream: &str,
    include_usage: bool,
) -> (Vec<u8>, StreamTranslator) {
    let mut t = StreamTranslator::new(up, client, "client-model", include_usage);
    let mut out = Vec::new();
    t.push(stream.as_bytes(), &mut out);
    t.finish(&mut out);
    (out, t)
}

fn events(out: &[u8]) -> Vec<(Option<String>, String)> {
    let mut d = crate::SseDecoder::new();
    let mut evs: Vec<_> = d.push(out).into_iter().map(|e| (e.event, e.data)).collect();
    evs.extend(d.finish().map(|e| (e.event, e.data)));
    evs
}

/// What an Anthropic client sees, checked against the order its SDK requires.
#[derive(Debug, Default)]
struct AnthropicView {
    text: String,
    tools: Vec<(String, String, String)>,
    stop_reason: String,
    usage: Value,
    start_usage: Value,
}

fn anthropic_view(out: &[u8]) -> AnthropicView {
    let evs = events(out);
    let names: Vec<String> = evs.iter().map(|(e, _)| e.clone().unwrap()).collect();
    assert_eq!(
        names.first().map(String::as_str),
        Some("message_start"),
        "{names:?}"
    );
    assert_eq!(
        &names[names.len() - 2..],
        ["message_delta", "message_stop"],
        "{names:?}"
    );
    let mut v = AnthropicView::default();
    let mut open: Option<(u64, String)> = None;
    let mut next = 0;
    for (name, data) in &evs {
        let d: Value = serde_json::from_str(data).unwrap();
        assert_eq!(
            d["type"],
            name.as_deref().unwrap(),
            "event name matches data type"
        );
        match name.as_deref().unwrap() {
            "message_start" => v.start_usage = d["message"]["usage"].clone(),
            "content_block_start" => {
                assert!(
                    open.is_none(),
                    "content_block_stop before the next block starts: {names:?}"
                );
                assert_eq!(d["index"], next);
                let ty = d["content_block"]["type"].as_str().unwrap().to_string();
                if ty == "tool_use" {
                    let b = &d["content_block"];
                    v.tools.push((
                        b["id"].as_str().unwrap().into(),
                        b["name"].as_str().unwrap().into(),
                        String::new(),
                    ));
                }
                open = Some((next, ty));
                next += 1;
            }
            "content_block_delta" => {
                let (i, ty) = open.clone().expect("delta inside a block");
                assert_eq!(d["index"], i);
                match d["delta"]["type"].as_str().unwrap() {
                    "text_delta" => {
                        assert_eq!(ty, "text");
                        v.text.push_str(d["delta"]["text"].as_str().unwrap());
                    }
                    "input_json_delta" => {
                        assert_eq!(ty, "tool_use");
                        v.tools
                            .last_mut()
                            .unwrap()
                            .2
                            .push_str(d["delta"]["partial_json"].as_str().unwrap());
                    }
                    other => panic!("delta {other}"),
                }
            }
            "content_block_stop" => {
                assert_eq!(d["index"], open.take().expect("stop of an open block").0);
            }
            "message_delta" => {
                assert!(open.is_none(), "blocks closed before message_delta");
                v.stop_reason = d["delta"]["stop_reason"].as_str().unwrap().into();
                v.usage = d["usage"].clone();
            }
            "message_stop" => {}
            other => panic!("unexpected event {other}"),
        }
    }
    v
}

/// What an OpenAI client sees, checked against the order its SDK requires.
#[derive(Debug, Default)]
struct OpenAiView {
    text: String,
    /// index → (id, name, arguments)
    tools: BTreeMap<u64, (String, String, String)>,
    finish: String,
    usage: Option<Value>,
}

fn openai_view(out: &[u8], include_usage: bool) -> OpenAiView {
    let evs = events(out);
    assert!(evs.iter().all(|(e, _)| e.is_none()));
    assert_eq!(evs.last().unwrap().1, "[DONE]");
    let chunks: Vec<Value> = evs[..evs.len() - 1]
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(
        chunks[0]["choices"][0]["delta"]["role"], "assistant",
        "role chunk first"
    );
    let mut v = OpenAiView::default();
    let mut finished = false;
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["model"], "client-model");
        let choices = c["choices"].as_array().unwrap();
        if choices.is_empty() {
            assert!(finished, "usage chunk after the finish chunk");
            v.usage = Some(c["usage"].clone());
            continue;
        }
        assert!(!finished, "nothing but usage after the finish chunk");
        let ch = &choices[0];
        if let Some(f) = ch["finish_reason"].as_str() {
            v.finish = f.into();
            finished = true;
        }
        let d = &ch["delta"];
        if let Some(t) = d["content"].as_str() {
            v.text.push_str(t);
        }
        for tc in d["tool_calls"].as_array().into_iter().flatten() {
            let i = tc["index"].as_u64().unwrap();
            match v.tools.get_mut(&i) {
                None => {
                    assert_eq!(
                        tc["type"], "function",
                        "first delta of a call has type, id and name"
                    );
                    v.tools.insert(
                        i,
                        (
                            tc["id"].as_str().unwrap().into(),
                            tc["function"]["name"].as_str().unwrap().into(),
                            tc["function"]["arguments"].as_str().unwrap_or("").into(),
                        ),
                    );
                }
                Some(t) => t.2.push_str(tc["function"]["arguments"].as_str().unwrap()),
            }
        }
    }
    assert!(finished, "a finish chunk");
    assert_eq!(v.usage.is_some(), include_usage);
    v
}

/// What a Gemini client sees.
#[derive(Debug, Default)]
struct GeminiView {
    text: String,
    calls: Vec<Value>,
    finish: String,
    usage: Value,
}

fn gemini_view(out: &[u8]) -> GeminiView {
    let evs = events(out);
    let mut v = GeminiView::default();
    for (i, (e, d)) in evs.iter().enumerate() {
        assert!(e.is_none());
        let d: Value = serde_json::from_str(d).unwrap();
        let c = &d["candidates"][0];
        assert_eq!(c["content"]["role"], "model");
        for p in c["content"]["parts"].as_array().unwrap() {
            if let Some(t) = p["text"].as_str() {
                v.text.push_str(t);
            }
            if let Some(fc) = p.get("functionCall") {
                v.calls.push(fc.clone());
            }
        }
        let last = i == evs.len() - 1;
        assert_eq!(
            c.get("finishReason").is_some(),
            last,
            "finishReason only on the last event"
        );
        if last {
            v.finish = c["finishReason"].as_str().unwrap().into();
            v.usage = d["usageMetadata"].clone();
        }
    }
    v
}

// --- the known failure classes -----------------------------------------------------------

#[test]
fn tool_call_first_openai_stream_to_anthropic_starts_with_message_start() {
    let (out, t) = run(O, A, OPENAI_TOOL_FIRST, false);
    let v = anthropic_view(&out);
    let names: Vec<String> = events(&out).into_iter().map(|e| e.0.unwrap()).collect();
    assert_eq!(
        &names[..3],
        [
            "message_start",
            "content_block_start",
            "content_block_delta"
        ]
    );
    assert_eq!(v.text, "");
    assert_eq!(
        v.tools,
        vec![
            (
                "call_abc".into(),
                "get_weather".into(),
                "{\"city\":\"Paris\"}".into()
            ),
            ("call_def".into(), "get_time".into(), "{}".into()),
        ]
    );
    assert_eq!(v.stop_reason, "tool_use");
    assert_eq!(
        v.usage,
        json!({"input_tokens": 30, "output_tokens": 10, "cache_read_input_tokens": 20, "cache_creation_input_tokens": 0})
    );
    assert!(t.upstream_done());
    assert_eq!(
        t.usage(),
        Usage {
            input_tokens: 50,
            output_tokens: 10,
            cached_tokens: 20
        }
    );
}

#[test]
fn anthropic_input_json_delta_is_never_lost_towards_openai() {
    let (out, t) = run(A, O, ANTHROPIC_TEXT_TOOL, true);
    let v = openai_view(&out, true);
    assert_eq!(v.text, "Let me check.");
    assert_eq!(
        v.tools.get(&0),
        Some(&(
            "toolu_01".into(),
            "get_weather".into(),
            "{\"city\": \"Paris\"}".into()
        ))
    );
    assert_eq!(v.finish, "tool_calls");
    assert_eq!(
        v.usage.unwrap(),
        json!({"prompt_tokens": 105, "completion_tokens": 25, "total_tokens": 130, "prompt_tokens_details": {"cached_tokens": 70}})
    );
    assert_eq!(
        t.usage(),
        Usage {
            input_tokens: 105,
            output_tokens: 25,
            cached_tokens: 70
        }
    );
}

#[test]
fn anthropic_input_json_delta_is_never_lost_towards_gemini() {
    let (out, _) = run(A, G, ANTHROPIC_TEXT_TOOL, false);
    let v = gemini_view(&out);
    assert_eq!(v.text, "Let me check.");
    assert_eq!(
        v.calls,
        vec![json!({"id": "toolu_01", "name": "get_weather", "args": {"city": "Paris"}})]
    );
    assert_eq!(v.finish, "STOP");
    assert_eq!(v.usage["cachedContentTokenCount"], 70);
    assert_eq!(v.usage["promptTokenCount"], 105);
}

#[test]
fn cached_tokens_are_never_reported_as_zero() {
    let (out, _) = run(G, O, GEMINI_TEXT_TOOL, true);
    assert_eq!(
        openai_view(&out, true).usage.unwrap()["prompt_tokens_details"]["cached_tokens"],
        32
    );
    let (out, _) = run(G, A, GEMINI_TEXT_TOOL, false);
    let v = anthropic_view(&out);
    assert_eq!(v.usage["cache_read_input_tokens"], 32);
    assert_eq!(v.usage["input_tokens"], 8);
    assert_eq!(
        v.start_usage["cache_read_input_tokens"], 32,
        "message_start carries the known input usage"
    );
    let (out, _) = run(O, G, OPENAI_TOOL_FIRST, false);
    assert_eq!(gemini_view(&out).usage["cachedContentTokenCount"], 20);
}

// --- each pair ---------------------------------------------------------------------------

#[test]
fn gemini_stream_to_openai() {
    let (out, t) = run(G, O, GEMINI_TEXT_TOOL, false);
    let v = openai_view(&out, false);
    assert_eq!(v.text, "Hello world", "thought parts are not text");
    let (id, name, args) = v.tools.get(&0).unwrap();
    assert!(id.starts_with("call_"));
    assert_eq!(
        (name.as_str(), args.as_str()),
        ("get_weather", "{\"city\":\"Paris\"}")
    );
    assert_eq!(v.finish, "tool_calls");
    assert!(t.upstream_done());
    assert_eq!(
        t.usage(),
        Usage {
            input_tokens: 40,
            output_tokens: 12,
            cached_tokens: 32
        }
    );
}

#[test]
fn gemini_stream_to_anthropic() {
    let (out, _) = run(G, A, GEMINI_TEXT_TOOL, false);
    let v = anthropic_view(&out);
    assert_eq!(v.text, "Hello world");
    assert_eq!(v.tools.len(), 1);
    assert_eq!(v.tools[0].2, "{\"city\":\"Paris\"}");
    assert_eq!(v.stop_reason, "tool_use");
    let (out, _) = run(G, A, GEMINI_TOOL_ONLY, false);
    let v = anthropic_view(&out);
    assert_eq!(
        v.tools,
        vec![("fc_1".into(), "lookup".into(), "{\"q\":\"x\"}".into())]
    );
}

#[test]
fn openai_text_stream_to_anthropic_and_gemini() {
    let (out, _) = run(O, A, OPENAI_TEXT, false);
    let v = anthropic_view(&out);
    assert_eq!(v.text, "Hello é");
    assert_eq!(v.stop_reason, "max_tokens");
    assert_eq!(v.usage["input_tokens"], 9);
    let (out, _) = run(O, G, OPENAI_TEXT, false);
    let v = gemini_view(&out);
    assert_eq!(v.text, "Hello é");
    assert_eq!(v.finish, "MAX_TOKENS");
}

#[test]
fn openai_tool_stream_to_gemini_sends_whole_calls() {
    let (out, _) = run(O, G, OPENAI_TOOL_FIRST, false);
    let v = gemini_view(&out);
    assert_eq!(
        v.calls,
        vec![
            json!({"id": "call_abc", "name": "get_weather", "args": {"city": "Paris"}}),
            json!({"id": "call_def", "name": "get_time", "args": {}}),
        ]
    );
    // The first call is sent as soon as the second starts, not at the end.
    let evs = events(&out);
    assert_eq!(evs.len(), 2);
}

#[test]
fn anthropic_thinking_is_skipped_and_stop_sequence_maps_to_stop() {
    let (out, _) = run(A, O, ANTHROPIC_THINKING_TEXT, false);
    let v = openai_view(&out, false);
    assert_eq!(v.text, "Answer");
    assert_eq!(v.finish, "stop");
    let (out, _) = run(A, G, ANTHROPIC_THINKING_TEXT, false);
    assert_eq!(gemini_view(&out).text, "Answer");
}

#[test]
fn openai_include_usage_false_sends_no_usage_chunk() {
    let (out, t) = run(A, O, ANTHROPIC_TEXT_TOOL, false);
    assert!(openai_view(&out, false).usage.is_none());
    assert_eq!(
        t.usage().output_tokens,
        25,
        "usage is still known to the gateway"
    );
}

// --- split anywhere ----------------------------------------------------------------------

#[test]
fn every_split_point_gives_the_same_output_as_whole_events() {
    let streams = [
        (O, OPENAI_TOOL_FIRST),
        (O, OPENAI_TEXT),
        (A, ANTHROPIC_TEXT_TOOL),
        (A, ANTHROPIC_THINKING_TEXT),
        (G, GEMINI_TEXT_TOOL),
    ];
    for (up, s) in streams {
        for client in Protocol::ALL {
            let (whole, wt) = run(up, client, s, true);
            let bytes = s.as_bytes();
            for i in 0..=bytes.len() {
                let mut t = StreamTranslator::new(up, client, "client-model", true);
                let mut out = Vec::new();
                t.push(&bytes[..i], &mut out);
                t.push(&bytes[i..], &mut out);
                t.finish(&mut out);
                assert_eq!(out, whole, "{up}->{client} split at {i}");
                assert_eq!(t.usage(), wt.usage());
            }
        }
    }
}

#[test]
fn byte_by_byte_and_crlf_give_the_same_output() {
    for (up, s) in [
        (A, ANTHROPIC_TEXT_TOOL),
        (G, GEMINI_TEXT_TOOL),
        (O, OPENAI_TOOL_FIRST),
    ] {
        for client in Protocol::ALL {
            let (whole, _) = run(up, client, s, true);
            let mut t = StreamTranslator::new(up, client, "client-model", true);
            let mut out = Vec::new();
            for b in s.as_bytes() {
                t.push(std::slice::from_ref(b), &mut out);
            }
            t.finish(&mut out);
            assert_eq!(out, whole, "{up}->{client} byte by byte");
            let crlf = s.replace("\r\n", "\n").replace('\n', "\r\n");
            if up != client {
                let (out, _) = run(up, client, &crlf, true);
                assert_eq!(
                    String::from_utf8_lossy(&out),
                    String::from_utf8_lossy(&whole),
                    "{up}->{client} CRLF"
                );
            }
        }
    }
}

#[test]
fn translation_is_incremental() {
    let mut t = StreamTranslator::new(A, O, "m", false);
    let mut out = Vec::new();
    let first_two = ANTHROPIC_TEXT_TOOL
        .split("\n\n")
        .take(4)
        .collect::<Vec<_>>()
        .join("\n\n")
        + "\n\n";
    t.push(first_two.as_bytes(), &mut out);
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("Let me check."),
        "text is out before the upstream ends: {text}"
    );
    assert!(!t.upstream_done());
}

// --- ends, cuts and errors ---------------------------------------------------------------

#[test]
fn finish_is_idempotent_and_closes_a_cut_stream() {
    for client in Protocol::ALL {
        if client == O {
            continue;
        }
        let cut = &OPENAI_TEXT[..OPENAI_TEXT.find("finish_reason\":\"length").unwrap() - 200];
        let mut t = StreamTranslator::new(O, client, "client-model", true);
        let mut out = Vec::new();
        t.push(cut.as_bytes(), &mut out);
        assert!(!t.upstream_done(), "a cut is not a clean end");
        t.finish(&mut out);
        let len = out.len();
        t.finish(&mut out);
        assert_eq!(out.len(), len, "finish is idempotent");
        match client {
            A => assert_eq!(anthropic_view(&out).stop_reason, "end_turn"),
            G => assert_eq!(gemini_view(&out).finish, "STOP"),
            O => {}
        }
    }
    let mut t = StreamTranslator::new(A, O, "client-model", true);
    let mut out = Vec::new();
    t.push(&ANTHROPIC_TEXT_TOOL.as_bytes()[..400], &mut out);
    t.finish(&mut out);
    t.finish(&mut out);
    openai_view(&out, true);
    assert_eq!(String::from_utf8(out).unwrap().matches("[DONE]").count(), 1);
}

#[test]
fn empty_upstream_still_gives_a_well_formed_client_stream() {
    let (out, t) = run(O, A, "", false);
    let v = anthropic_view(&out);
    assert_eq!(v.stop_reason, "end_turn");
    assert!(!t.upstream_done());
    let (out, _) = run(G, O, "", true);
    openai_view(&out, true);
}

#[test]
fn unterminated_last_event_is_flushed_by_finish() {
    let s = OPENAI_TEXT.trim_end();
    let (out, t) = run(O, A, s, false);
    assert!(
        t.upstream_done(),
        "[DONE] without its blank line still counts"
    );
    assert_eq!(anthropic_view(&out).text, "Hello é");
}

#[test]
fn upstream_error_event_becomes_the_clients_error_event() {
    let anthropic_err = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":3}}}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let (out, t) = run(A, O, anthropic_err, false);
    assert!(t.upstream_done());
    let evs = events(&out);
    let last: Value = serde_json::from_str(&evs.last().unwrap().1).unwrap();
    assert_eq!(last["error"]["message"], "Overloaded");
    assert!(
        !String::from_utf8_lossy(&out).contains("[DONE]"),
        "nothing after the error"
    );
    let openai_err =
        "data: {\"error\":{\"message\":\"server exploded\",\"type\":\"server_error\"}}\n\n";
    let (out, _) = run(O, A, openai_err, false);
    let evs = events(&out);
    assert_eq!(evs.len(), 1);
    assert_eq!(evs[0].0.as_deref(), Some("error"));
    assert!(evs[0].1.contains("server exploded"));
    let gemini_err = "data: {\"error\":{\"code\":503,\"message\":\"unavailable\",\"status\":\"UNAVAILABLE\"}}\n\n";
    let (out, _) = run(G, O, gemini_err, false);
    assert!(String::from_utf8_lossy(&out).contains("unavailable"));
}

#[test]
fn gemini_blocked_prompt_stream_is_content_filter() {
    let s = "data: {\"promptFeedback\":{\"blockReason\":\"SAFETY\"},\"usageMetadata\":{\"promptTokenCount\":4}}\n\n";
    let (out, t) = run(G, O, s, false);
    assert!(t.upstream_done());
    assert_eq!(openai_view(&out, false).finish, "content_filter");
}

#[test]
fn same_protocol_passes_bytes_through_and_tracks_usage_and_end() {
    for (p, s) in [
        (O, OPENAI_TOOL_FIRST),
        (A, ANTHROPIC_TEXT_TOOL),
        (G, GEMINI_TEXT_TOOL),
    ] {
        let (out, t) = run(p, p, s, true);
        assert_eq!(out, s.as_bytes());
        assert!(t.upstream_done());
        assert!(t.usage().input_tokens > 0 && t.usage().cached_tokens > 0);
    }
}

#[test]
fn openai_passthrough_holds_back_the_usage_chunk_the_client_did_not_ask_for() {
    let (out, t) = run(O, O, OPENAI_TOOL_FIRST, false);
    let evs = events(&out);
    assert_eq!(evs.last().unwrap().1, "[DONE]");
    assert!(
        evs.iter().all(|(_, d)| !d.contains("\"choices\":[]")),
        "no usage-only chunk"
    );
    let (with_usage, _) = run(O, O, OPENAI_TOOL_FIRST, true);
    assert_eq!(
        with_usage,
        OPENAI_TOOL_FIRST.as_bytes(),
        "asked for: byte-for-byte"
    );
    assert_eq!(
        t.usage().cached_tokens,
        20,
        "the gateway still sees the usage"
    );
    assert_eq!(
        events(&out).len(),
        events(OPENAI_TOOL_FIRST.as_bytes()).len() - 1
    );
    for i in 0..=OPENAI_TOOL_FIRST.len() {
        let mut t = StreamTranslator::new(O, O, "m", false);
        let mut split = Vec::new();
        t.push(&OPENAI_TOOL_FIRST.as_bytes()[..i], &mut split);
        t.push(&OPENAI_TOOL_FIRST.as_bytes()[i..], &mut split);
        t.finish(&mut split);
        assert_eq!(split, out, "split at {i}");
    }
}

#[test]
fn garbage_streams_never_panic() {
    let garbage: [&[u8]; 6] = [
        b"data: {\n\n",
        b"data: [1,2]\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":9,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"x\"}}\n\n",
        b"\xff\xfe\x00data:\n\n:\n\n",
        b"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"function\":{\"arguments\":\"x\"}}]}}]}\n\n",
        b"data: {\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":5}]}}]}\n\n",
        b"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":\"many\"}}\n\n",
    ];
    for up in Protocol::ALL {
        for client in Protocol::ALL {
            for g in garbage {
                let mut t = StreamTranslator::new(up, client, "m", true);
                let mut out = Vec::new();
                t.push(g, &mut out);
                t.finish(&mut out);
            }
            for s in [OPENAI_TOOL_FIRST, ANTHROPIC_TEXT_TOOL, GEMINI_TEXT_TOOL] {
                let mut t = StreamTranslator::new(up, client, "m", true);
                let mut out = Vec::new();
                t.push(s.as_bytes(), &mut out);
                t.finish(&mut out);
            }
        }
    }
}

// --- UsageScanner ------------------------------------------------------------------------

#[test]
fn usage_scanner_reads_each_protocol_at_every_split() {
    for (p, s, want) in [
        (
            O,
            OPENAI_TOOL_FIRST,
            Usage {
                input_tokens: 50,
                output_tokens: 10,
                cached_tokens: 20,
            },
        ),
        (
            O,
            OPENAI_TEXT,
            Usage {
                input_tokens: 9,
                output_tokens: 3,
                cached_tokens: 0,
            },
        ),
        (
            A,
            ANTHROPIC_TEXT_TOOL,
            Usage {
                input_tokens: 105,
                output_tokens: 25,
                cached_tokens: 70,
            },
        ),
        (
            A,
            ANTHROPIC_THINKING_TEXT,
            Usage {
                input_tokens: 10,
                output_tokens: 7,
                cached_tokens: 0,
            },
        ),
        (
            G,
            GEMINI_TEXT_TOOL,
            Usage {
                input_tokens: 40,
                output_tokens: 12,
                cached_tokens: 32,
            },
        ),
    ] {
        let bytes = s.as_bytes();
        for i in 0..=bytes.len() {
            let mut u = UsageScanner::new(p);
            u.push(&bytes[..i]);
            u.push(&bytes[i..]);
            assert_eq!(u.usage(), want, "{p} split at {i}");
        }
    }
}

/// A Responses API stream's usage is in its `response.completed` event, named as that API
/// names it; an event without usage (or with `null`) leaves it as it was.
#[test]
fn a_responses_scanner_reads_the_usage_of_the_completed_response_at_every_split() {
    let s = concat!(
        "event: response.created\n",
        "data: {\"type\":\"response.created\",\"response\":{\"status\":\"in_progress\",\"usage\":null}}\n\n",
        "event: response.output_text.delta\n",
        "data: {\"type\":\"response.output_text.delta\",\"delta\":\"the \\\"usage\\\": {}\"}\n\n",
        "event: response.completed\n",
        "data: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":30,\"input_tokens_details\":{\"cached_tokens\":12},\"output_tokens\":9,\"output_tokens_details\":{\"reasoning_tokens\":4},\"total_tokens\":39}}}\n\n",
    );
    let want = Usage {
        input_tokens: 30,
        output_tokens: 9,
        cached_tokens: 12,
    };
    let bytes = s.as_bytes();
    for i in 0..=bytes.len() {
        let mut u = UsageScanner::for_responses();
        u.push(&bytes[..i]);
        u.push(&bytes[i..]);
        assert_eq!(u.usage(), want, "split at {i}");
    }
    // A Chat Completions scanner finds no figures of its own names there.
    let mut chat = UsageScanner::new(O);
    chat.push(bytes);
    assert_eq!(chat.usage(), Usage::default());
}

#[test]
fn usage_scanner_ignores_usage_words_in_text() {
    let s = "data: {\"choices\":[{\"delta\":{\"content\":\"the \\\"usage\\\": {\\\"prompt_tokens\\\": 999}\"}}],\"usage\":null}\n\n";
    let mut u = UsageScanner::new(O);
    u.push(s.as_bytes());
    assert_eq!(u.usage(), Usage::default());
}

#[test]
fn object_after_key_handles_strings_with_braces() {
    let d = br#" {"usage": {"a": "}{\"", "b": {"c": 1}}, "x": 2}"#;
    assert_eq!(
        object_after_key(d, b"\"usage\""),
        Some(&br#"{"a": "}{\"", "b": {"c": 1}}"#[..])
    );
    assert_eq!(object_after_key(br#"{"usage":null}"#, b"\"usage\""), None);
    assert_eq!(object_after_key(br#"{"usage":{"a":1"#, b"\"usage\""), None);
    // Cut after blanks: nothing past the end is read.
    assert_eq!(object_after_key(b"{\"usage\"  ", b"\"usage\""), None);
    assert_eq!(object_after_key(b"{\"usage\": ", b"\"usage\""), None);
}

/// The Responses API events of a translated stream: (name, data) in order.
fn responses_events(upstream: Protocol, bytes: &str) -> Vec<(String, Value)> {
    let mut t = StreamTranslator::for_responses(upstream, "client-model");
    let mut out = Vec::new();
    // Split anywhere: byte by byte.
    for b in bytes.as_bytes().chunks(1) {
        t.push(b, &mut out);
    }
    t.finish(&mut out);
    assert!(t.client_closed());
    let mut decoder = crate::sse::SseDecoder::new();
    let mut events = Vec::new();
    decoder.push_into(&out, &mut events);
    events
        .into_iter()
        .map(|e| {
            let data: Value = serde_json::from_str(&e.data).unwrap();
            let name = e.event.clone().unwrap();
            assert_eq!(data["type"], name.as_str(), "{data}");
            (name, data)
        })
        .collect()
}

#[test]
fn anthropic_text_and_tool_stream_to_the_responses_event_sequence() {
    let events = responses_events(A, ANTHROPIC_TEXT_TOOL);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    let mut want = vec![
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
    ];
    let deltas = names
        .iter()
        .filter(|n| **n == "response.function_call_arguments.delta")
        .count();
    assert!(deltas >= 2, "{names:?}");
    want.extend(std::iter::repeat_n(
        "response.function_call_arguments.delta",
        deltas,
    ));
    want.extend([
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert_eq!(names, want);
    for (i, (_, data)) in events.iter().enumerate() {
        assert_eq!(data["sequence_number"], i as u64);
    }
    assert_eq!(events[4].1["delta"], "Let me check.");
    assert_eq!(events[0].1["response"]["status"], "in_progress");
    let args_done = &events[names.len() - 3].1;
    assert_eq!(args_done["arguments"], "{\"city\": \"Paris\"}");
    assert_eq!(args_done["item_id"], "fc_toolu_01");
    let done = &events[names.len() - 1].1["response"];
    assert_eq!(done["status"], "completed");
    assert_eq!(done["store"], false);
    assert_eq!(done["id"], "resp_msg_01");
    assert_eq!(done["output"][0]["content"][0]["text"], "Let me check.");
    assert_eq!(done["output"][1]["call_id"], "toolu_01");
    assert_eq!(done["output"][1]["arguments"], "{\"city\": \"Paris\"}");
    assert_eq!(done["usage"]["input_tokens"], 105);
    assert_eq!(done["usage"]["input_tokens_details"]["cached_tokens"], 70);
    assert_eq!(done["usage"]["output_tokens"], 25);
}

#[test]
fn gemini_stream_to_the_responses_event_sequence() {
    let events = responses_events(G, GEMINI_TEXT_TOOL);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"response.created"));
    assert_eq!(names.last(), Some(&"response.completed"));
    // Every item added is done before the next one is added.
    let mut open = false;
    for n in &names {
        match *n {
            "response.output_item.added" => {
                assert!(!open, "{names:?}");
                open = true;
            }
            "response.output_item.done" => open = false,
            _ => {}
        }
    }
    let text: String = events
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap().to_string())
        .collect();
    let done = &events.last().unwrap().1["response"];
    assert_eq!(done["output"][0]["content"][0]["text"], text.as_str());
    assert_eq!(done["usage"]["input_tokens_details"]["cached_tokens"], 32);
}

#[test]
fn a_responses_stream_stopped_at_the_limit_ends_incomplete() {
    let events = responses_events(O, OPENAI_TEXT);
    let (name, data) = events.last().unwrap();
    assert_eq!(name, "response.incomplete");
    assert_eq!(
        data["response"]["incomplete_details"]["reason"],
        "max_output_tokens"
    );
    assert_eq!(
        data["response"]["output"][0]["content"][0]["text"],
        "Hello \u{e9}"
    );
}

/// What OpenAI sends for `OPENAI_TEXT`'s request without `stream_options.include_usage`: no
/// usage chunk, and no `"usage":null` in the other chunks.
const OPENAI_TEXT_UNASKED: &str = concat!(
    "data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
    ": keep-alive\n\n",
    "data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo \\u00e9\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n",
    "data: [DONE]\n\n",
);

fn filtered(scanner: &mut UsageScanner, parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for part in parts {
        scanner.filter(part, &mut out);
    }
    scanner.finish(&mut out);
    out
}

/// The gateway asked the upstream for usage on behalf of a client that did not: the client gets
/// exactly what the upstream would have sent it had nobody asked, however the bytes are split,
/// and the usage is still read.
#[test]
fn a_stripping_scanner_gives_the_unasked_stream_at_every_split() {
    let want_usage = Usage {
        input_tokens: 9,
        output_tokens: 3,
        cached_tokens: 0,
    };
    let crlf_asked = OPENAI_TEXT.replace("\n", "\r\n");
    let crlf_unasked = OPENAI_TEXT_UNASKED.replace("\n", "\r\n");
    for (asked, unasked) in [
        (OPENAI_TEXT, OPENAI_TEXT_UNASKED),
        (crlf_asked.as_str(), crlf_unasked.as_str()),
    ] {
        let bytes = asked.as_bytes();
        for i in 0..=bytes.len() {
            let mut u = UsageScanner::stripping_usage(O);
            let out = filtered(&mut u, &[&bytes[..i], &bytes[i..]]);
            assert_eq!(String::from_utf8_lossy(&out), unasked, "split at {i}");
            assert_eq!(u.usage(), want_usage, "split at {i}");
        }
        let mut u = UsageScanner::stripping_usage(O);
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(
            String::from_utf8_lossy(&filtered(&mut u, &singles)),
            unasked
        );
        assert_eq!(u.usage(), want_usage);
    }
    // The mock upstream's and other servers' shapes: pretty-printed, usage before choices.
    let spaced = "data: {\"usage\": null, \"choices\": [{\"delta\": {}}]}\n\ndata: {\"usage\": {\"prompt_tokens\": 4, \"completion_tokens\": 2}, \"choices\": [ ]}\n\ndata: [DONE]\n\n";
    let mut u = UsageScanner::stripping_usage(O);
    assert_eq!(
        String::from_utf8_lossy(&filtered(&mut u, &[spaced.as_bytes()])),
        "data: {\"choices\": [{\"delta\": {}}]}\n\ndata: [DONE]\n\n"
    );
    assert_eq!((u.usage().input_tokens, u.usage().output_tokens), (4, 2));
}

/// Only the usage-only chunk goes: a chunk with choices and usage both is kept, and an event
/// the stream ends inside (no blank line after it) is forwarded as it came.
#[test]
fn a_stripping_scanner_keeps_everything_else() {
    let s = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"usage\":{\"prompt_tokens\":1}}\n\nevent: x\ndata: {\"choices\":[]}\n\ndata: [DONE]";
    let mut u = UsageScanner::stripping_usage(O);
    assert_eq!(
        String::from_utf8_lossy(&filtered(&mut u, &[s.as_bytes()])),
        s
    );
    assert_eq!(u.usage().input_tokens, 1);
    // Not stripping (a client that asked, or another protocol): the bytes themselves.
    for mut u in [UsageScanner::new(O), UsageScanner::stripping_usage(A)] {
        assert!(!u.strips());
        let out = filtered(&mut u, &[OPENAI_TEXT.as_bytes()]);
        assert_eq!(String::from_utf8_lossy(&out), OPENAI_TEXT);
    }
}

#[test]
fn null_usage_spans_take_their_comma() {
    let cut =
        |d: &str| null_usage_span(d.as_bytes()).map(|(a, b)| format!("{}{}", &d[..a], &d[b..]));
    assert_eq!(
        cut(r#"{"a":1,"usage":null}"#).as_deref(),
        Some(r#"{"a":1}"#)
    );
    assert_eq!(
        cut(r#"{"a":1 , "usage" : null,"b":2}"#).as_deref(),
        Some(r#"{"a":1 ,"b":2}"#)
    );
    assert_eq!(
        cut(r#"{"usage":null, "b":2}"#).as_deref(),
        Some(r#"{"b":2}"#)
    );
    assert_eq!(cut(r#"{"usage":null}"#).as_deref(), Some("{}"));
    assert_eq!(cut(r#"{"usage":{"a":1}}"#), None);
    assert_eq!(cut(r#"{"t":"say \"usage\":null"}"#), None);
    // Blanks between the value and the comma after it go too.
    assert_eq!(
        cut(r#"{"usage":null ,"b":2}"#).as_deref(),
        Some(r#"{"b":2}"#)
    );
    // Not inside an object: nothing to take.
    assert_eq!(cut(r#""usage":null"#), None);
}

#[test]
fn an_empty_choices_chunk_without_usage_reaches_the_client() {
    // Azure's first chunk (its prompt filter results) has no choices and no usage: only the
    // usage-only chunk the gateway asked for is held back.
    let stream = concat!(
        "data: {\"id\":\"\",\"choices\":[],\"prompt_filter_results\":[]}\n\n",
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n",
        "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1,\"total_tokens\":2}}\n\n",
        "data: [DONE]\n\n",
    );
    let (out, t) = run(O, O, stream, false);
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("prompt_filter_results"), "{out}");
    assert!(!out.contains("total_tokens"), "{out}");
    assert_eq!(t.usage().input_tokens, 1);
}

#[test]
fn a_passed_through_stream_is_closed_only_at_the_upstreams_end() {
    let mut t = StreamTranslator::new(A, A, "m", false);
    let mut out = Vec::new();
    t.push(b"event: ping\ndata: {\"type\":\"ping\"}\n\n", &mut out);
    assert!(!t.client_closed());
    t.push(
        b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        &mut out,
    );
    assert!(t.client_closed());
}

#[test]
fn only_an_openai_scanner_made_to_strip_strips() {
    assert!(UsageScanner::stripping_usage(O).strips());
    assert!(!UsageScanner::stripping_usage(A).strips());
    assert!(!UsageScanner::new(O).strips());
}

#[test]
fn chat_completions_streams_to_the_responses_event_sequence() {
    // `finish_reason: length`: the response is incomplete.
    let events = responses_events(O, OPENAI_TEXT);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"response.created"));
    assert_eq!(names.last(), Some(&"response.incomplete"));
    let text: String = events
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(text, "Hello é");
    let done = &events[names.len() - 1].1["response"];
    assert_eq!(done["status"], "incomplete");
    assert_eq!(done["store"], false);
    assert_eq!(done["usage"]["input_tokens"], 9);
    assert_eq!(done["usage"]["output_tokens"], 3);

    let events = responses_events(O, OPENAI_TOOL_FIRST);
    assert_eq!(events[events.len() - 1].0, "response.completed");
    let done = &events[events.len() - 1].1["response"];
    assert_eq!(done["output"][0]["type"], "function_call");
    assert_eq!(done["output"][0]["call_id"], "call_abc");
    assert_eq!(done["output"][0]["arguments"], "{\"city\":\"Paris\"}");
    assert_eq!(done["output"][1]["name"], "get_time");
}

#[test]
fn anthropic_blocks_that_start_with_content_and_deltas_that_belong_nowhere() {
    let stream = concat!(
        "event: message_start\n",
        "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n",
        // A text block that starts with its text.
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"Hi \"}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"\"}}\n\n",
        // Argument JSON on a text block is not a tool call's.
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"there\"}}\n\n",
        "event: content_block_stop\n",
        "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        // A tool call that starts with its whole input.
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_9\",\"name\":\"f\",\"input\":{\"a\":1}}}\n\n",
        "event: content_block_stop\n",
        "data: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
        "event: message_delta\n",
        "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":7}}\n\n",
        "event: message_stop\n",
        "data: {\"type\":\"message_stop\"}\n\n",
    );
    let (out, _) = run(A, O, stream, false);
    let v = openai_view(&out, false);
    assert_eq!(v.text, "Hi there");
    assert_eq!(
        v.tools.get(&0),
        Some(&("toolu_9".into(), "f".into(), "{\"a\":1}".into()))
    );
    assert_eq!(v.finish, "tool_calls");
}

#[test]
fn a_responses_stream_is_closed_only_once_its_end_is_sent() {
    let mut t = StreamTranslator::for_responses(A, "client-model");
    let mut out = Vec::new();
    assert!(!t.client_closed());
    let first_event = ANTHROPIC_TEXT_TOOL.find("\n\n").unwrap() + 2;
    t.push(&ANTHROPIC_TEXT_TOOL.as_bytes()[..first_event], &mut out);
    assert!(!t.client_closed());
    t.push(&ANTHROPIC_TEXT_TOOL.as_bytes()[first_event..], &mut out);
    t.finish(&mut out);
    assert!(t.client_closed());
}

#[test]
fn a_translated_stream_is_closed_only_once_its_end_is_sent() {
    for client in [O, G] {
        let mut t = StreamTranslator::new(A, client, "client-model", true);
        let mut out = Vec::new();
        assert!(!t.client_closed(), "{client}");
        let first_event = ANTHROPIC_TEXT_TOOL.find("\n\n").unwrap() + 2;
        t.push(&ANTHROPIC_TEXT_TOOL.as_bytes()[..first_event], &mut out);
        assert!(!t.client_closed(), "{client}");
        t.push(&ANTHROPIC_TEXT_TOOL.as_bytes()[first_event..], &mut out);
        t.finish(&mut out);
        assert!(t.client_closed(), "{client}");
    }
}

#[test]
fn the_clients_stream_opens_on_the_upstreams_first_start_event() {
    let mut t = StreamTranslator::new(A, O, "client-model", true);
    let mut out = Vec::new();
    // A ping before `message_start` opens nothing.
    t.push(b"event: ping\ndata: {\"type\":\"ping\"}\n\n", &mut out);
    assert_eq!(String::from_utf8_lossy(&out), "");
    let first_event = ANTHROPIC_TEXT_TOOL.find("\n\n").unwrap() + 2;
    t.push(&ANTHROPIC_TEXT_TOOL.as_bytes()[..first_event], &mut out);
    let events = crate::sse::SseDecoder::new().push(&out);
    assert_eq!(events.len(), 1, "{events:?}");
    let chunk: Value = serde_json::from_str(&events[0].data).unwrap();
    assert_eq!(chunk["id"], "chatcmpl-msg_01");
    assert_eq!(
        chunk["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
}

#[test]
fn text_after_a_tool_call_is_a_delta_of_its_own_block_for_anthropic() {
    let stream = concat!(
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"after\"},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n",
    );
    let (out, _) = run(O, A, stream, false);
    let all: Vec<Value> = events(&out)
        .into_iter()
        .map(|(_, data)| serde_json::from_str::<Value>(&data).unwrap())
        .collect();
    // A `stop` after a tool call is a stop for the tool's sake.
    let stop_reasons: Vec<&Value> = all
        .iter()
        .filter(|v| v["type"] == "message_delta")
        .map(|v| &v["delta"]["stop_reason"])
        .collect();
    assert_eq!(stop_reasons, [&json!("tool_use")]);
    let text_deltas: Vec<Value> = all
        .into_iter()
        .filter(|v| v["delta"]["type"] == "text_delta")
        .collect();
    assert_eq!(
        text_deltas,
        [
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "after"}})
        ]
    );
}

#[test]
fn a_finished_call_goes_to_a_gemini_client_before_the_finish() {
    let (out, _) = run(A, G, ANTHROPIC_TEXT_TOOL, false);
    let chunks: Vec<Value> = events(&out)
        .into_iter()
        .map(|(_, data)| serde_json::from_str::<Value>(&data).unwrap())
        .collect();
    let with_call: Vec<&Value> = chunks
        .iter()
        .filter(|c| {
            c["candidates"][0]["content"]["parts"][0]
                .get("functionCall")
                .is_some()
        })
        .collect();
    assert_eq!(with_call.len(), 1, "{chunks:?}");
    assert_eq!(with_call[0]["candidates"][0].get("finishReason"), None);
    assert_eq!(
        with_call[0]["candidates"][0]["content"]["parts"],
        json!([{"functionCall": {"id": "toolu_01", "name": "get_weather", "args": {"city": "Paris"}}}])
    );
}

// --- a whole answer to a stream request ---------------------------------------------------

const OPENAI_ANSWER: &str = r#"{"id":"chatcmpl-7","object":"chat.completion","model":"up","choices":[{"index":0,"message":{"role":"assistant","content":"Hello whole","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13}}"#;

/// The client's whole stream of a plain JSON answer.
fn whole(
    up: Protocol,
    client: Protocol,
    body: &str,
    include_usage: bool,
) -> (Vec<u8>, StreamTranslator) {
    let mut t = StreamTranslator::new(up, client, "client-model", include_usage);
    let mut out = Vec::new();
    t.whole_answer(body.as_bytes(), &mut out).unwrap();
    // What the relay does at the body's end adds nothing.
    let before = out.len();
    t.finish(&mut out);
    assert_eq!(out.len(), before, "the stream was already complete");
    (out, t)
}

#[test]
fn a_whole_answer_becomes_the_stream_a_live_answer_gives_in_each_client_protocol() {
    for include_usage in [false, true] {
        let (out, t) = whole(O, O, OPENAI_ANSWER, include_usage);
        let v = openai_view(&out, include_usage);
        assert_eq!(v.text, "Hello whole");
        assert_eq!(v.finish, "tool_calls");
        assert_eq!(
            v.tools[&0],
            (
                "call_1".to_owned(),
                "get_weather".to_owned(),
                r#"{"city":"Paris"}"#.to_owned()
            )
        );
        assert!(t.upstream_done() && t.client_closed());
        assert_eq!((t.usage().input_tokens, t.usage().output_tokens), (9, 4));
    }
    let (out, _) = whole(O, A, OPENAI_ANSWER, false);
    let v = anthropic_view(&out);
    assert_eq!(v.text, "Hello whole");
    assert_eq!(v.stop_reason, "tool_use");
    assert_eq!(v.tools[0].1, "get_weather");
    let anthropic = r#"{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"Hi there"}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":2}}"#;
    let (out, t) = whole(A, A, anthropic, false);
    let v = anthropic_view(&out);
    assert_eq!(
        (v.text.as_str(), v.stop_reason.as_str()),
        ("Hi there", "end_turn")
    );
    assert_eq!(t.usage().output_tokens, 2);
    let (out, _) = whole(A, G, anthropic, false);
    let v = gemini_view(&out);
    assert_eq!((v.text.as_str(), v.finish.as_str()), ("Hi there", "STOP"));
    let mut responses = StreamTranslator::for_responses(O, "client-model");
    let mut out = Vec::new();
    responses
        .whole_answer(OPENAI_ANSWER.as_bytes(), &mut out)
        .unwrap();
    let names: Vec<_> = events(&out).into_iter().filter_map(|(e, _)| e).collect();
    assert_eq!(names.first().map(String::as_str), Some("response.created"));
    assert_eq!(names.last().map(String::as_str), Some("response.completed"));
}

#[test]
fn an_error_or_an_answer_without_content_is_not_made_into_a_stream() {
    for body in [
        r#"{"error":{"message":"overloaded","type":"server_error"}}"#,
        r#"{"choices":[]}"#,
        r#"{"choices":[{"index":0,"message":{"role":"assistant","content":""}}]}"#,
        "",
        "not json",
    ] {
        let mut t = StreamTranslator::new(O, O, "client-model", false);
        let mut out = Vec::new();
        assert!(t.whole_answer(body.as_bytes(), &mut out).is_err(), "{body}");
        assert!(out.is_empty() && !t.upstream_done(), "{body}");
    }
    let mut t = StreamTranslator::new(A, O, "client-model", false);
    let error = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    assert!(t.whole_answer(error.as_bytes(), &mut Vec::new()).is_err());
}

#[test]
fn a_whole_answer_cut_anywhere_is_refused_with_nothing_written_or_ends_its_stream() {
    let gemini = r#"{"responseId":"r1","candidates":[{"content":{"role":"model","parts":[{"text":"Hi"},{"functionCall":{"name":"f","args":{"a":1}}}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":2}}"#;
    let anthropic = r#"{"id":"msg_1","content":[{"type":"text","text":"Hi"},{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}],"stop_reason":"tool_use","usage":{"input_tokens":5,"output_tokens":2}}"#;
    for (up, body) in [(O, OPENAI_ANSWER), (A, anthropic), (G, gemini)] {
        for client in [O, A, G] {
            for end in 0..=body.len() {
                let Some(cut) = body.get(..end) else { continue };
                let mut t = StreamTranslator::new(up, client, "client-model", true);
                let mut out = Vec::new();
                if t.whole_answer(cut.as_bytes(), &mut out).is_err() {
                    assert!(out.is_empty(), "{up:?}→{client:?} at {end}");
                    continue;
                }
                assert_eq!(end, body.len(), "{up:?}→{client:?}: a cut answer was taken");
                match client {
                    O => drop(openai_view(&out, true)),
                    A => drop(anthropic_view(&out)),
                    G => assert_eq!(gemini_view(&out).finish, "STOP"),
                }
            }
        }
    }
}
