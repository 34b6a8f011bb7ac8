"""The official Anthropic Python SDK as a Switchyard client (data-plane/tests/sdk_matrix.rs).

usage: anthropic_client.py BASE_URL TOKEN MODEL SCENARIO[,SCENARIO...]

Prints one JSON line: {scenario: result}. A scenario that raises records
{"exception": ...} instead of stopping the others. Models used, from MODEL:
MODEL (text answers), MODEL-tools (tool calls), MODEL-429, MODEL-503, no-such-model.
"""
import base64
import json
import sys
import traceback

import anthropic

BASE, TOKEN, MODEL = sys.argv[1], sys.argv[2], sys.argv[3]
SCENARIOS = sys.argv[4].split(",")

SYSTEM = "SYSTEM-PROMPT-MARK: answer briefly."
TOOL_RESULT = '{"temperature_c": 21, "mark": "TOOL-RESULT-MARK"}'
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
IMAGE_URL = "https://example.com/IMAGE-URL-MARK.png"
TOOLS = [
    {
        "name": "get_weather",
        "description": "The current weather of a city",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]
MAX_TOKENS = 256

client = anthropic.Anthropic(base_url=BASE, api_key=TOKEN, max_retries=0, timeout=20)


def user(scenario):
    return {"role": "user", "content": f"scenario={scenario}: what is the weather in Paris?"}


def headers_of(raw):
    return {
        "channel": raw.headers.get("x-switchyard-channel"),
        "attempts": raw.headers.get("x-switchyard-attempts"),
    }


def usage_of(u):
    if u is None:
        return None
    return {
        "input": u.input_tokens,
        "output": u.output_tokens,
        "cached": u.cache_read_input_tokens,
    }


def complete(model, msgs, **kw):
    raw = client.messages.with_raw_response.create(
        model=model, max_tokens=MAX_TOKENS, system=SYSTEM, messages=msgs, **kw
    )
    msg = raw.parse()
    text = "".join(b.text for b in msg.content if b.type == "text")
    calls = [{"id": b.id, "name": b.name, "arguments": b.input} for b in msg.content if b.type == "tool_use"]
    return {
        "text": text,
        "tool_calls": calls,
        "stop": msg.stop_reason,
        "usage": usage_of(msg.usage),
        "model": msg.model,
        "content": msg.content,
        **headers_of(raw),
    }


def stream(model, msgs, **kw):
    raw = client.messages.with_raw_response.create(
        model=model, max_tokens=MAX_TOKENS, system=SYSTEM, messages=msgs, stream=True, **kw
    )
    events, pieces, blocks, stop, usage = [], [], {}, None, None
    for event in raw.parse():
        events.append(event.type)
        if event.type == "message_start":
            usage = usage_of(event.message.usage)
        elif event.type == "content_block_start":
            b = event.content_block
            if b.type == "tool_use":
                blocks[event.index] = {"id": b.id, "name": b.name, "arguments": "", "pieces": 0}
        elif event.type == "content_block_delta":
            d = event.delta
            if d.type == "text_delta":
                pieces.append(d.text)
            elif d.type == "input_json_delta":
                blocks[event.index]["arguments"] += d.partial_json
                blocks[event.index]["pieces"] += 1
        elif event.type == "message_delta":
            stop = event.delta.stop_reason
            u = event.usage
            if usage is None:
                usage = {"input": None, "output": None, "cached": None}
            usage["output"] = u.output_tokens
            if getattr(u, "cache_read_input_tokens", None):
                usage["cached"] = u.cache_read_input_tokens
            if getattr(u, "input_tokens", None):
                usage["input"] = u.input_tokens
    calls = []
    for _, c in sorted(blocks.items()):
        c["arguments"] = json.loads(c["arguments"] or "{}")
        calls.append(c)
    return {
        "events": events,
        "pieces": pieces,
        "text": "".join(pieces),
        "tool_calls": calls,
        "stop": stop,
        "usage": usage,
        "completed": bool(events) and events[-1] == "message_stop",
        **headers_of(raw),
    }


def error_of(fn):
    try:
        fn()
        return {"status": None, "exception": None}
    except anthropic.APIStatusError as e:
        body = e.body if isinstance(e.body, dict) else {}
        err = body.get("error", {}) if isinstance(body, dict) else {}
        return {
            "status": e.status_code,
            "exception": type(e).__name__,
            "type": err.get("type") if isinstance(err, dict) else None,
            "envelope": body.get("type") if isinstance(body, dict) else None,
            "message": err.get("message") if isinstance(err, dict) else e.message,
            "retry_after": e.response.headers.get("retry-after"),
            "channel": e.response.headers.get("x-switchyard-channel"),
        }


def public(result):
    result = dict(result)
    result.pop("content", None)
    return result


def s_text():
    return public(complete(MODEL, [user("text")]))


def s_stream():
    return stream(MODEL, [user("stream")])


def s_tools():
    return public(complete(MODEL + "-tools", [user("tools")], tools=TOOLS))


def s_tools_stream():
    return stream(MODEL + "-tools", [user("tools_stream")], tools=TOOLS)


def s_tool_result():
    first = complete(MODEL + "-tools", [user("tool_result")], tools=TOOLS)
    call = first["tool_calls"][0]
    # The assistant turn is the SDK's own content blocks, passed back as users do.
    assistant = {"role": "assistant", "content": first["content"]}
    result = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": TOOL_RESULT}],
    }
    second = complete(MODEL, [user("tool_result"), assistant, result], tools=TOOLS)
    return {"first_id": call["id"], "first": public(first), **public(second)}


def s_image():
    data = base64.b64encode(PNG).decode()
    content = [
        {"type": "text", "text": "scenario=image: describe these images"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
        {"type": "image", "source": {"type": "url", "url": IMAGE_URL}},
    ]
    return public(complete(MODEL, [{"role": "user", "content": content}]))


def s_errors():
    msgs = [user("errors")]
    bad = anthropic.Anthropic(base_url=BASE, api_key="sk-not-a-switchyard-token", max_retries=0, timeout=20)

    def call(c, model):
        return lambda: c.messages.create(model=model, max_tokens=MAX_TOKENS, messages=msgs)

    return {
        "bad_token": error_of(call(bad, MODEL)),
        "unknown_model": error_of(call(client, "no-such-model")),
        "rate_limited": error_of(call(client, MODEL + "-429")),
        "unavailable": error_of(call(client, MODEL + "-503")),
    }


def s_count_tokens():
    raw = client.messages.with_raw_response.count_tokens(
        model=MODEL, system=SYSTEM, messages=[user("count_tokens")], tools=TOOLS
    )
    return {"input_tokens": raw.parse().input_tokens, **headers_of(raw)}


out = {}
for name in SCENARIOS:
    try:
        out[name] = globals()["s_" + name]()
    except Exception as e:  # recorded, so the other scenarios still run
        out[name] = {"exception": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=3)}
print(json.dumps(out))
