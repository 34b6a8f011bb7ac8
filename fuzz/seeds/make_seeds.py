#!/usr/bin/env python3
"""Writes the hand-written seed inputs of the fuzz targets into fuzz/corpus/<target>/.

Seeds are small, real examples of what each parser receives (request bodies of each protocol,
responses, SSE streams, error bodies, multipart bodies, YAML configs, admin bodies). Run it again
after editing; the snapshot_proto seeds are made from the config_yaml ones (see README.md here).
"""
import json
import os
import zlib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "corpus")


def write(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, (dict, list)):
        data = json.dumps(data, ensure_ascii=False, indent=None, separators=(",", ":"))
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


IMG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
TOOL_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}

# ---------------------------------------------------------------- requests (all three protocols)
requests = {
    "openai_chat": {"model": "gpt-4o-mini", "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Say hi"}], "max_tokens": 64, "temperature": 0.2},
    "openai_stream_usage": {"model": "gpt-4o-mini", "stream": True,
        "stream_options": {"include_usage": True}, "stop": ["\n\n"], "top_p": 0.9,
        "messages": [{"role": "user", "content": "Count to three"}]},
    "openai_tools": {"model": "gpt-4o", "tool_choice": "auto", "parallel_tool_calls": False,
        "tools": [{"type": "function", "function": {"name": "weather", "description": "Weather",
                   "parameters": TOOL_SCHEMA}}],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\":21}"}]},
    "openai_vision_json": {"model": "gpt-4o", "response_format": {"type": "json_schema",
        "json_schema": {"name": "a", "schema": TOOL_SCHEMA}}, "seed": 7, "n": 1, "user": "u-1",
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + IMG}}]}]},
    "anthropic_messages": {"model": "claude-3-5-haiku-20241022", "max_tokens": 256,
        "system": "Be brief.", "messages": [{"role": "user", "content": "Hello"}],
        "metadata": {"user_id": "user-42"}},
    "anthropic_stream_tools": {"model": "claude-sonnet-4", "max_tokens": 1024, "stream": True,
        "tools": [{"name": "weather", "description": "Weather", "input_schema": TOOL_SCHEMA}],
        "tool_choice": {"type": "any"},
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather in Oslo?"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_01", "name": "weather",
                "input": {"city": "Oslo"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01",
                "content": [{"type": "text", "text": "-3C"}]}]}]},
    "anthropic_image_thinking": {"model": "claude-opus-4", "max_tokens": 2048,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "system": [{"type": "text", "text": "You see images.", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": IMG}},
            {"type": "text", "text": "Describe"}]}], "stop_sequences": ["END"], "top_k": 5},
    "anthropic_count_tokens": {"model": "claude-3-5-haiku-20241022",
        "messages": [{"role": "user", "content": "How many tokens is this?"}]},
    "gemini_generate": {"contents": [{"role": "user", "parts": [{"text": "Hi there"}]}],
        "systemInstruction": {"parts": [{"text": "Answer in French."}]},
        "generationConfig": {"maxOutputTokens": 100, "temperature": 0.5, "topK": 3,
                             "stopSequences": ["x"], "candidateCount": 1}},
    "gemini_tools": {"contents": [
            {"role": "user", "parts": [{"text": "Weather in Rome?"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "weather", "args": {"city": "Rome"}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "weather",
                "response": {"temp": 25}}}]}],
        "tools": [{"functionDeclarations": [{"name": "weather", "description": "Weather",
                   "parameters": TOOL_SCHEMA}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["weather"]}}},
    "gemini_image_json": {"contents": [{"role": "user", "parts": [
            {"inlineData": {"mimeType": "image/png", "data": IMG}}, {"text": "What?"}]}],
        "generationConfig": {"responseMimeType": "application/json", "responseSchema": TOOL_SCHEMA,
                             "thinkingConfig": {"thinkingBudget": 512}}},
    "gemini_count_tokens_wrapped": {"generateContentRequest": {"model": "models/gemini-2.0-flash",
        "contents": [{"role": "user", "parts": [{"text": "count me"}]}]}},
}
for name, body in requests.items():
    write("provider_request", name + ".json", body)
    write("inspect_json", name + ".json", body)
    write("cache_key", name + ".json", body)

# what the cache key reads differently from a plain parse: escapes, repeated names, numbers
write("cache_key", "tricky_scalars.json",
      '{"z":1,"a":-0.0,"m":1e300,"n":12345678901234567890,"f":0.1,"s":"\\u00e9\\n\\u007f\\ud83d\\ude00",'
      '"\\u0061b":[true,null,{"y":2,"x":[1.5e-7,-3]}],"a":"last","stream":true,"user":"u"}')

# data-plane-only shapes for inspect_json
write("inspect_json", "openai_embeddings.json",
      {"model": "text-embedding-3-small", "input": ["alpha", "beta", "gamma"]})
write("inspect_json", "responses_api.json", {"model": "gpt-4.1", "prompt_cache_key": "sess-1",
      "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}]})
write("inspect_json", "escaped_model.json",
      '{ "stream" : true, "model" : "gpt-\\u0034o\\/mini", "session_id": 17, "messages": [] }')

# ---------------------------------------------------------------- responses
responses = {
    "openai_text": {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello!"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15,
                  "prompt_tokens_details": {"cached_tokens": 4}}},
    "openai_tool_call": {"id": "chatcmpl-2", "object": "chat.completion", "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant",
            "content": None, "tool_calls": [{"id": "call_9", "type": "function",
                "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}}]}}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 9}},
    "anthropic_text": {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude",
        "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                    {"type": "text", "text": "Bonjour"}],
        "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 2, "cache_read_input_tokens": 5,
                  "cache_creation_input_tokens": 1}},
    "anthropic_tool_use": {"id": "msg_02", "type": "message", "role": "assistant", "model": "claude",
        "content": [{"type": "text", "text": "Checking"}, {"type": "tool_use", "id": "toolu_1",
                     "name": "weather", "input": {"city": "Oslo"}}],
        "stop_reason": "tool_use", "usage": {"input_tokens": 30, "output_tokens": 12}},
    "anthropic_stop_sequence": {"id": "msg_03", "type": "message", "role": "assistant",
        "content": [{"type": "text", "text": "a b"}], "stop_reason": "stop_sequence",
        "stop_sequence": "END", "usage": {"input_tokens": 1, "output_tokens": 1}},
    "gemini_text": {"candidates": [{"content": {"role": "model", "parts": [{"text": "Ciao"}]},
        "finishReason": "STOP", "index": 0}], "usageMetadata": {"promptTokenCount": 8,
        "candidatesTokenCount": 2, "totalTokenCount": 10, "cachedContentTokenCount": 3,
        "thoughtsTokenCount": 1}, "modelVersion": "gemini-2.0-flash", "responseId": "r1"},
    "gemini_function_call": {"candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": {"name": "weather", "args": {"city": "Rome"}}}]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 20, "candidatesTokenCount": 5}},
    "gemini_safety": {"candidates": [{"finishReason": "SAFETY", "index": 0}],
        "promptFeedback": {"blockReason": "SAFETY"}},
}
# Usage figures at the extremes: u64::MAX (the poison), i64::MAX, the bound and one
# above it, negative, fractional and string figures. Written as text, so each figure is exactly
# what an upstream would send.
U64_MAX, I64_MAX, BOUND = 18446744073709551615, 9223372036854775807, 1000000000
extreme_responses = {
    "openai_usage_u64_max": '{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}' % (U64_MAX, I64_MAX, U64_MAX, U64_MAX),
    "openai_usage_odd_figures": '{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":-1,"completion_tokens":2.5,"prompt_tokens_details":{"cached_tokens":"7"}}}',
    "anthropic_usage_at_bound": '{"id":"m","type":"message","role":"assistant","content":[{"type":"text","text":"x"}],"stop_reason":"end_turn","usage":{"input_tokens":%d,"output_tokens":%d,"cache_read_input_tokens":%d,"cache_creation_input_tokens":%d}}' % (BOUND, BOUND + 1, BOUND, BOUND),
    "gemini_usage_huge": '{"candidates":[{"content":{"role":"model","parts":[{"text":"x"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":%d,"candidatesTokenCount":%d,"thoughtsTokenCount":%d,"cachedContentTokenCount":1e300}}' % (BOUND, BOUND, U64_MAX),
}
responses.update(extreme_responses)
for name, body in responses.items():
    write("provider_response", name + ".json", body)

# The data plane's check of a completion answer: the OpenAI answers above, and the shapes where
# its one-pass read must step aside (escapes, repeats, odd types, spacing, deep nesting).
for name, body in responses.items():
    if name.startswith("openai"):
        write("answer_check", name + ".json", body)
answer_checks = {
    "empty_choices": '{"choices":[],"usage":{"prompt_tokens":3}}',
    "blank_message": '{"choices":[{"message":{"content":null,"tool_calls":[],"refusal":""}}]}',
    "legacy_text": '{"choices":[{"text":"x","index":0},{"text":""}],"usage":{"completion_tokens":2}}',
    "escaped_key": '{"ch\\u006fices":[],"us\\u0061ge":{"prompt_tokens":1}}',
    "escaped_text": '{"choices":[{"text":"a\\n\\ud83d\\ude00"}]}',
    "repeated": '{"choices":null,"choices":[{"message":{"content":"a","content":"b"}}],"usage":{},"usage":{"prompt_tokens":2}}',
    "odd_types": '{"choices":[[{"text":"x"}],null,1],"usage":"x"}',
    "spaced": ' {\n "usage" : { "prompt_tokens" : 1e2 } ,\t"choices" : [ { "message" : { "content" : [ ] } } ] }\r\n',
    "usage_figures": '{"choices":[{"text":"x"}],"usage":{"prompt_tokens":999999999,"completion_tokens":null,"prompt_tokens_details":{"cached_tokens":1000000000,"cached_tokens":2},"prompt_tokens":0}}',
    "numbers": '{"a":[0,-0,1.5,-2e-3,3E+4,01],"choices":[]}',
    "deep": '{"a":' + '[' * 127 + ']' * 127 + ',"choices":[{"text":"x"}]}',
}
for name, body in answer_checks.items():
    write("answer_check", name + ".json", body)

# ---------------------------------------------------------------- SSE streams
def sse(events, crlf=False):
    out = ""
    for name, data in events:
        if name:
            out += "event: " + name + "\n"
        out += "data: " + (data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))) + "\n\n"
    return out.replace("\n", "\r\n") if crlf else out

def oai_chunk(delta, finish=None, **extra):
    c = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
         "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    c.update(extra)
    return c

streams = {
    "openai_text": sse([(None, oai_chunk({"role": "assistant", "content": ""})),
        (None, oai_chunk({"content": "Hel"})), (None, oai_chunk({"content": "lo"})),
        (None, oai_chunk({}, "stop")),
        (None, {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [],
                "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}),
        (None, "[DONE]")]),
    "openai_tool_calls": sse([(None, oai_chunk({"role": "assistant", "tool_calls": [{"index": 0,
            "id": "call_1", "type": "function", "function": {"name": "weather", "arguments": ""}}]})),
        (None, oai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{\"ci"}}]})),
        (None, oai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "ty\":\"Oslo\"}"}}]})),
        (None, oai_chunk({"tool_calls": [{"index": 1, "id": "call_2", "type": "function",
            "function": {"name": "time", "arguments": "{}"}}]})),
        (None, oai_chunk({}, "tool_calls")), (None, "[DONE]")]),
    "openai_error_crlf": ": keep-alive\r\n\r\n" + sse([(None, oai_chunk({"content": "x"})),
        (None, {"error": {"message": "overloaded", "type": "server_error"}})], crlf=True),
    "anthropic_text": sse([
        ("message_start", {"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "content": [], "model": "claude", "stop_reason": None,
            "usage": {"input_tokens": 25, "output_tokens": 1, "cache_read_input_tokens": 3}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}),
        ("ping", {"type": "ping"}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "Hello"}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": " world"}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn",
            "stop_sequence": None}, "usage": {"output_tokens": 15}}),
        ("message_stop", {"type": "message_stop"})]),
    "anthropic_tool_use": sse([
        ("message_start", {"type": "message_start", "message": {"id": "msg_2", "role": "assistant",
            "content": [], "usage": {"input_tokens": 40, "output_tokens": 1}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
            "content_block": {"type": "thinking", "thinking": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "let me"}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("content_block_start", {"type": "content_block_start", "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "{\"city\": "}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "\"Oslo\"}"}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 1}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 30}}),
        ("message_stop", {"type": "message_stop"})]),
    "anthropic_error": sse([
        ("message_start", {"type": "message_start", "message": {"id": "msg_3", "content": [],
            "usage": {"input_tokens": 1}}}),
        ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})]),
    "gemini_text": sse([
        (None, {"candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}, "index": 0}]}),
        (None, {"candidates": [{"content": {"role": "model", "parts": [{"text": "lo"}]}, "index": 0}]}),
        (None, {"candidates": [{"content": {"role": "model", "parts": [{"text": "!"}]},
            "finishReason": "STOP", "index": 0}], "usageMetadata": {"promptTokenCount": 4,
            "candidatesTokenCount": 3, "totalTokenCount": 7}})]),
    "gemini_function_call": sse([
        (None, {"candidates": [{"content": {"role": "model", "parts": [
            {"thought": True, "text": "thinking"}]}}]}),
        (None, {"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"name": "weather", "args": {"city": "Rome"}}},
            {"functionCall": {"name": "time", "args": {}}}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 4,
                              "thoughtsTokenCount": 2}})]),
    "gemini_cut": sse([(None, {"candidates": [{"content": {"parts": [{"text": "partial"}]}}]})])
        + "data: {\"candidates\":[{\"content\":{\"parts\":[{\"te",
    # Usage figures at the extremes (see the responses above), in each protocol's stream.
    "openai_usage_extremes": sse([(None, '{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}],"usage":null}'),
        (None, '{"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":-3,"prompt_tokens_details":{"cached_tokens":%d}}}' % (U64_MAX, BOUND)),
        (None, "[DONE]")]),
    "anthropic_usage_extremes": sse([
        ("message_start", '{"type":"message_start","message":{"id":"m","content":[],"usage":{"input_tokens":%d,"cache_read_input_tokens":%d}}}' % (I64_MAX, BOUND)),
        ("message_delta", '{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":%d,"input_tokens":0.5}}' % U64_MAX),
        ("message_stop", {"type": "message_stop"})]),
    "gemini_usage_extremes": sse([(None, '{"candidates":[{"content":{"role":"model","parts":[{"text":"x"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":%d,"candidatesTokenCount":%d,"thoughtsTokenCount":%d}}' % (BOUND, BOUND, BOUND))]),
}
for name, body in streams.items():
    write("provider_stream", name + ".sse", body)
    write("sse_decoder", name + ".sse", body)
write("sse_decoder", "fields.sse",
      "retry: 100\nid: 7\n: comment\nevent: multi\ndata: line one\ndata:line two\ndata\n\nevent: no-data\n\ndata: last")

# ---------------------------------------------------------------- error bodies, count tokens
errors = {
    "openai": {"error": {"message": "Rate limit reached for gpt-4o", "type": "rate_limit_error",
               "param": None, "code": "rate_limit_exceeded"}},
    "anthropic": {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    "gemini": {"error": {"code": 400, "message": "API key not valid.", "status": "INVALID_ARGUMENT",
               "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo"}]}},
    "gemini_array": [{"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}],
    "detail": {"detail": "Not Found"},
    "count_anthropic": {"input_tokens": 42},
    "count_gemini": {"totalTokens": 17, "cachedContentTokenCount": 2},
}
for name, body in errors.items():
    write("provider_errors", name + ".json", body)
write("provider_errors", "html.txt", "<html><body><h1>502 Bad Gateway</h1></body></html>\n")

# ---------------------------------------------------------------- multipart bodies
def multipart(boundary, fields, quoted=False):
    ct = "multipart/form-data; boundary=" + ('"%s"' % boundary if quoted else boundary)
    body = ""
    for name, value, extra in fields:
        body += "--" + boundary + "\r\n"
        body += 'Content-Disposition: form-data; name="%s"%s\r\n' % (name, extra)
        if extra:
            body += "Content-Type: audio/wav\r\n"
        body += "\r\n" + value + "\r\n"
    body += "--" + boundary + "--\r\n"
    return ct + "\n" + body

write("inspect_multipart", "transcription",
      multipart("----WebKitFormBoundary7MA4YWxkTrZu0gW", [
          ("file", "RIFF\x00\x00WAVEfmt ", '; filename="a.wav"'),
          ("model", "whisper-1", ""), ("response_format", "json", "")]))
write("inspect_multipart", "stream_quoted",
      multipart("abc123", [("model", " gpt-4o-transcribe ", ""), ("stream", "true", ""),
                           ("file", "\r\n--abc12 not the end", '; filename="b.mp3"')], quoted=True))
write("inspect_multipart", "two_models",
      multipart("x", [("model", "first", ""), ("model", "second", "")]).replace(
          "multipart/form-data;", "multipart/form-data; charset=utf-8;"))

# ---------------------------------------------------------------- file and batch ids
# A text the parser reads (an upstream id, a gateway-shaped one), and the inputs that make an
# id: 8 bytes of channel, 8 of key, then the upstream id.
write("object_id", "upstream_file", "file-abc123DEF456")
write("object_id", "gateway_shaped", "batch_sy1" + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA_-")
write("object_id", "make_file", b"\x00\x01\x00\x00\x00\x00\x00\x00\x07\x00\x00\x00\x00\x00\x00\x00file-abc123")
write("object_id", "make_msgbatch", b"\x02\x09\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\x7fmsgbatch_01HJ")

# ---------------------------------------------------------------- model patterns
write("model_patterns", "basic", "gpt-4o-mini\ngpt-4o-mini\ngpt-*\n*-mini\n!gpt-4o-*\n*\nclaude-?-haiku")
write("model_patterns", "unicode", "模型-四\n模型-?\n模*\n!模型-四\n?型*四")
write("model_patterns", "ties", "a-b-c\na*\n*c\na?b*\n*-b-*\na-b-c\na-b-c")

# ---------------------------------------------------------------- admin bodies
admin = {
    "channel": {"name": " openai-main ", "provider": "openai", "base_url": "https://user:pw@api.openai.com/v1",
                "status": "enabled", "auto_ban": True, "max_concurrency": 32,
                "capabilities": {"max_context": 128000, "vision": True, "tools": True},
                "retry_status_codes": [429, 503], "retry_error_patterns": ["overloaded"],
                "headers": {"OpenAI-Organization": "org-123456789012"}},
    "channel_mock": {"name": "sim", "provider": "mock", "max_concurrency": None},
    "credential": {"secret": "  sk-live-0123456789abcdef  ", "enabled": False},
    "credential_env": {"secret_env": "OPENAI_API_KEY"},
    "route": {"model_pattern": "gpt-4o*", "routing_mode": "weighted", "sticky_session": True,
              "stable_first": True, "stable_first_denominator": 10, "retry_times": 2,
              "channel_retry_times": 1, "cooldown_seconds": 30, "single_member_id": None},
    "member": {"channel_id": 1, "upstream_model": " gpt-4o-2024-08-06 ", "group_name": " eu ",
               "priority": 10, "weight": 3, "canary": True, "capabilities": {"streaming": False}},
    "team": {"name": "research", "models": ["gpt-*", "claude-3-5-haiku", "gpt-*"], "members": [3, 1, 3],
             "plan": {" 1 ": {"priority": 5, "weight": 2}}, "retry_limit": 3, "disable_failover": True},
    "token": {"name": "ci", "route_group_name": " eu ", "team_id": 2, "allow_pinning": True},
    "settings": {"retry_times": 3, "cooldown_seconds": 20, "sticky_enabled": True,
                 "max_request_body_bytes": 10485760},
}
for name, body in admin.items():
    write("admin_body", name + ".json", body)

# ---------------------------------------------------------------- YAML configs
write("config_yaml", "minimal.yaml", """channels:
  - name: sim
    provider: mock
routes:
  - model_pattern: gpt-4o-mini
    members:
      - { channel: sim }
""")
write("config_yaml", "full.yaml", """settings:
  retry_times: 2
  sticky_enabled: true
  cooldown_seconds: 15
channels:
  - id: 1
    name: openai
    provider: openai
    base_url: https://api.openai.com/v1
    credentials: ["sk-test-aaaaaaaaaaaa", {secret: "${OPENAI_KEY_2}", enabled: false}]
    max_concurrency: 16
    capabilities: { max_context: 128000, vision: true }
    retry_status_codes: [429, 500, 503]
    retry_error_patterns: [overloaded]
    headers: { OpenAI-Organization: org-1 }
  - id: 2
    name: anthropic
    provider: anthropic
    base_url: https://api.anthropic.com
    credentials: ["sk-ant-xxxx"]
    status: disabled
  - name: gemini
    provider: gemini
    base_url: https://generativelanguage.googleapis.com
    credentials: ["AIza-test"]
routes:
  - id: 10
    model_pattern: "gpt-4o*"
    routing_mode: weighted
    sticky_session: true
    members:
      - { id: 100, channel: openai, upstream_model: gpt-4o, priority: 10, weight: 3, group: eu }
      - { id: 101, channel: anthropic, upstream_model: claude-sonnet-4, canary: true }
  - id: 11
    model_pattern: gemini-?.?-flash
    routing_mode: single
    single_member_id: 110
    members:
      - { id: 110, channel: gemini }
  - model_pattern: "*"
    enabled: false
    members: []
teams:
  - id: 1
    name: research
    models: ["gpt-*"]
    members: [100]
    plan: { 100: { priority: 1, weight: 5 } }
    retry_limit: 1
tokens:
  - name: ci
    token: sk-switchyard-ci
    team: research
    route_group: eu
  - name: hashed
    token_sha256: 0000000000000000000000000000000000000000000000000000000000000000
""")
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                       "data-plane", "examples", "standalone.yaml"), "rb") as f:
    write("config_yaml", "standalone.yaml", f.read())
# An alias bomb: a 2 000-byte value repeated by 4 400 aliases expands past twice the parser's
# bound (4 MiB), so the target starts from a file that must be refused by its expanded size
# (and that its assertion catches should the bound ever stop holding).
write("config_yaml", "alias_bomb.yaml",
      "channels:\n  - name: sim\n    provider: mock\n    retry_error_patterns: [&s \""
      + "x" * 2000 + "\"" + ", *s" * 4400 + "]\n")


# ---------------------------------------------------------------- Bedrock event streams
def eventstream(headers, payload):
    """One AWS event-stream message (string headers), as Bedrock's ConverseStream sends it."""
    h = b""
    for name, value in headers:
        n, v = name.encode(), value.encode()
        h += bytes([len(n)]) + n + b"\x07" + len(v).to_bytes(2, "big") + v
    body = json.dumps(payload, separators=(",", ":")).encode()
    total = 16 + len(h) + len(body)
    prelude = total.to_bytes(4, "big") + len(h).to_bytes(4, "big")
    msg = prelude + zlib.crc32(prelude).to_bytes(4, "big") + h + body
    return msg + zlib.crc32(msg).to_bytes(4, "big")


def bedrock_event(kind, payload):
    return eventstream([(":event-type", kind), (":content-type", "application/json"),
                        (":message-type", "event")], payload)


text_stream = b"".join([
    bedrock_event("messageStart", {"role": "assistant"}),
    bedrock_event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hel"}}),
    bedrock_event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "lo"}}),
    bedrock_event("contentBlockStop", {"contentBlockIndex": 0}),
    bedrock_event("messageStop", {"stopReason": "end_turn"}),
    bedrock_event("metadata", {"usage": {"inputTokens": 5, "outputTokens": 2, "totalTokens": 7},
                               "metrics": {"latencyMs": 10}}),
])
write("bedrock_stream", "text.bin", text_stream)
write("bedrock_stream", "tool_use.bin", b"".join([
    bedrock_event("messageStart", {"role": "assistant"}),
    bedrock_event("contentBlockStart", {"contentBlockIndex": 0, "start": {
        "toolUse": {"toolUseId": "tooluse_1", "name": "get_weather"}}}),
    bedrock_event("contentBlockDelta", {"contentBlockIndex": 0,
                                        "delta": {"toolUse": {"input": "{\"city\":"}}}),
    bedrock_event("contentBlockDelta", {"contentBlockIndex": 0,
                                        "delta": {"toolUse": {"input": "\"Paris\"}"}}}),
    bedrock_event("contentBlockStop", {"contentBlockIndex": 0}),
    bedrock_event("messageStop", {"stopReason": "tool_use"}),
    bedrock_event("metadata", {"usage": {"inputTokens": 9, "outputTokens": 4,
                                         "cacheReadInputTokens": 3}}),
]))
write("bedrock_stream", "exception.bin", b"".join([
    bedrock_event("messageStart", {"role": "assistant"}),
    eventstream([(":exception-type", "throttlingException"), (":content-type", "application/json"),
                 (":message-type", "exception")], {"message": "Too many requests"}),
]))
write("bedrock_stream", "cut.bin", text_stream[:-40])

# http1_framing: request heads whose framing the server and the reference reading must agree on
# (both framings in each order and case, duplicates, codings, lengths at and over the largest
# body, hosts, userinfo), with a body after some.
framing_heads = {
    "plain_get": b"GET / HTTP/1.1\r\nhost: a\r\n\r\n",
    "length": b"POST /v1/chat HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
    "length_zero_padded": b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 0012\r\n\r\n",
    "length_at_limit": b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 1073741824\r\n\r\n",
    "length_over_limit": b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 1073741825\r\n\r\n",
    "length_list": b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 5, 5\r\n\r\n",
    "length_twice": b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 5\r\nContent-Length: 5\r\n\r\n",
    "chunked": b"POST / HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "chunked_upper": b"POST / HTTP/1.1\r\nHOST: a\r\nTRANSFER-ENCODING: CHUNKED\r\n\r\n",
    "te_then_cl": b"POST / HTTP/1.1\r\nhost: a\r\nTransfer-Encoding: chunked\r\ncontent-length: 5\r\n\r\n0\r\n\r\n",
    "cl_then_te": b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 5\r\ntransfer-encoding: Chunked\r\n\r\n0\r\n\r\n",
    "cl_te_cl": b"POST / HTTP/1.1\r\nContent-Length: 5\r\nhost: a\r\ntRaNsFeR-eNcOdInG: chunked\r\ncontent-length: 5\r\n\r\n",
    "coding_list": b"POST / HTTP/1.1\r\nhost: a\r\ntransfer-encoding: gzip, chunked\r\n\r\n",
    "te_twice": b"POST / HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\ntransfer-encoding: identity\r\n\r\n",
    "te_http10": b"POST / HTTP/1.0\r\ntransfer-encoding: chunked\r\n\r\n",
    "no_host": b"POST / HTTP/1.1\r\ncontent-length: 1\r\n\r\nx",
    "two_hosts": b"GET / HTTP/1.0\r\nhost: a\r\nHost: b\r\n\r\n",
    "userinfo": b"GET http://u:p@a/x HTTP/1.1\r\nhost: a\r\n\r\n",
    "authority_form": b"CONNECT a:443 HTTP/1.1\r\nhost: a\r\n\r\n",
    "partial": b"POST / HTTP/1.1\r\nhost: a\r\ncontent-le",
}
for name, head in framing_heads.items():
    write("http1_framing", name, head)

# Guardrail detectors: texts with every detector's true and near-miss cases, placeholders
# already in the text, and a private key cut short.
guard_texts = {
    "pii": "mail a@b.io or first.last+x@mail.example.org, call +1 212 555 0100 or (212) 555-0100",
    "cards": "card 4111 1111 1111 1111, not 4111 1111 1111 1112; amex 378282246310005 2024",
    "iban": "pay DE89 3704 0044 0532 0130 00 AND not DE88 3704 0044 0532 0130 00",
    "keys": "sk-proj-AbCdEf0123456789GhIjKl sk-ant-api03-abcdefghij0123456789klmn "
            "AKIAIOSFODNN7EXAMPLE ghp_a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1 xoxb-1234-5678-abcdefgh",
    "placeholders": "[EMAIL_1] a@b.io [EMAIL_2] [EMAIL_ [CARD_1 EMP-12345 secretive",
    "pem": "-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf\n"
           "-----END RSA PRIVATE KEY-----\n-----BEGIN PRIVATE KEY-----\nMIIB+/=",
    "unicode": "模型 a@b.io é 4111111111111111 模",
}
for name, text in guard_texts.items():
    write("guard_detectors", name, text)
