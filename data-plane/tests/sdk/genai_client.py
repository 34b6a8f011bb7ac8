"""The official Google GenAI Python SDK (google-genai) as a Switchyard client
(data-plane/tests/sdk_matrix.rs).

usage: genai_client.py BASE_URL TOKEN MODEL SCENARIO[,SCENARIO...]

Prints one JSON line: {scenario: result, "_sdk": {"version", "paths"}}. A scenario that raises
records {"exception": ...} instead of stopping the others. Models used, from MODEL:
MODEL (text answers), MODEL-tools (tool calls), MODEL-429, MODEL-503, no-such-model.

The API version (the path generation: /v1beta/models/... or /v1/models/...) is the SDK's own
default unless GENAI_API_VERSION names one; "_sdk.paths" lists the paths the SDK called.
"""
import base64
import json
import os
import sys
import traceback

from google import genai
from google.genai import errors, types

BASE, TOKEN, MODEL = sys.argv[1], sys.argv[2], sys.argv[3]
SCENARIOS = sys.argv[4].split(",")
API_VERSION = os.environ.get("GENAI_API_VERSION") or None
PATHS = []

SYSTEM = "SYSTEM-PROMPT-MARK: answer briefly."
TOOL_RESULT = {"temperature_c": 21, "mark": "TOOL-RESULT-MARK"}
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
IMAGE_URL = "https://example.com/IMAGE-URL-MARK.png"
TOOLS = [
    types.Tool(
        function_declarations=[
            types.FunctionDeclaration(
                name="get_weather",
                description="The current weather of a city",
                parameters={
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            )
        ]
    )
]


def record_path(request):
    PATHS.append(request.url.path)


def make_client(key):
    options = dict(
        base_url=BASE,
        timeout=20_000,
        retry_options=types.HttpRetryOptions(attempts=1),
        client_args={"event_hooks": {"request": [record_path]}},
    )
    if API_VERSION is not None:
        options["api_version"] = API_VERSION
    return genai.Client(api_key=key, http_options=types.HttpOptions(**options))


client = make_client(TOKEN)


def user(scenario):
    return types.Content(role="user", parts=[types.Part.from_text(text=f"scenario={scenario}: what is the weather in Paris?")])


def config(tools=False):
    return types.GenerateContentConfig(
        system_instruction=SYSTEM,
        tools=TOOLS if tools else None,
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True) if tools else None,
    )


def header(resp, name):
    h = resp.sdk_http_response.headers if resp.sdk_http_response is not None else None
    for k, v in (h or {}).items():
        if k.lower() == name:
            return v
    return None


def headers_of(resp):
    return {"channel": header(resp, "x-switchyard-channel"), "attempts": header(resp, "x-switchyard-attempts")}


def usage_of(u):
    if u is None:
        return None
    return {"input": u.prompt_token_count, "output": u.candidates_token_count, "cached": u.cached_content_token_count}


def finish(resp):
    c = resp.candidates[0] if resp.candidates else None
    if c is None or c.finish_reason is None:
        return None
    return getattr(c.finish_reason, "value", str(c.finish_reason))


def parts_of(resp):
    c = resp.candidates[0] if resp.candidates else None
    return (c.content.parts or []) if c is not None and c.content is not None else []


def texts(resp):
    return [p.text for p in parts_of(resp) if p.text is not None and not p.thought]


def calls_of(resp):
    return [
        {"id": p.function_call.id, "name": p.function_call.name, "arguments": p.function_call.args}
        for p in parts_of(resp)
        if p.function_call is not None
    ]


def complete(model, contents, tools=False):
    resp = client.models.generate_content(model=model, contents=contents, config=config(tools))
    return {
        "text": "".join(texts(resp)),
        "tool_calls": calls_of(resp),
        "stop": finish(resp),
        "usage": usage_of(resp.usage_metadata),
        "model": resp.model_version,
        "content": resp.candidates[0].content if resp.candidates else None,
        **headers_of(resp),
    }


def stream(model, contents, tools=False):
    pieces, calls, stop, usage, chunks, first = [], [], None, None, 0, None
    for resp in client.models.generate_content_stream(model=model, contents=contents, config=config(tools)):
        first = first or resp
        chunks += 1
        pieces.extend(texts(resp))
        calls.extend(calls_of(resp))
        stop = finish(resp) or stop
        if resp.usage_metadata is not None:
            usage = usage_of(resp.usage_metadata)
    return {
        "pieces": pieces,
        "text": "".join(pieces),
        "tool_calls": calls,
        "stop": stop,
        "usage": usage,
        "chunks": chunks,
        "completed": stop is not None,
        **(headers_of(first) if first is not None else {}),
    }


def error_of(fn):
    try:
        fn()
        return {"status": None, "exception": None}
    except errors.APIError as e:
        headers = e.response.headers if e.response is not None and hasattr(e.response, "headers") else {}
        return {
            "status": e.code,
            "exception": type(e).__name__,
            "type": e.status,
            "message": e.message,
            "retry_after": headers.get("retry-after"),
            "channel": headers.get("x-switchyard-channel"),
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
    return public(complete(MODEL + "-tools", [user("tools")], tools=True))


def s_tools_stream():
    return stream(MODEL + "-tools", [user("tools_stream")], tools=True)


def s_tool_result():
    first = complete(MODEL + "-tools", [user("tool_result")], tools=True)
    call = first["tool_calls"][0]
    answer = types.Content(
        role="user",
        parts=[
            types.Part(
                function_response=types.FunctionResponse(id=call["id"], name=call["name"], response=TOOL_RESULT)
            )
        ],
    )
    second = complete(MODEL, [user("tool_result"), first["content"], answer], tools=True)
    return {"first_id": call["id"], "first": public(first), **public(second)}


def s_image():
    contents = [
        types.Content(
            role="user",
            parts=[
                types.Part.from_text(text="scenario=image: describe these images"),
                types.Part.from_bytes(data=PNG, mime_type="image/png"),
                types.Part.from_uri(file_uri=IMAGE_URL, mime_type="image/png"),
            ],
        )
    ]
    return public(complete(MODEL, contents))


def s_errors():
    contents = [user("errors")]
    bad = make_client("sk-not-a-switchyard-token")

    def call(c, model):
        return lambda: c.models.generate_content(model=model, contents=contents)

    return {
        "bad_token": error_of(call(bad, MODEL)),
        "unknown_model": error_of(call(client, "no-such-model")),
        "rate_limited": error_of(call(client, MODEL + "-429")),
        "unavailable": error_of(call(client, MODEL + "-503")),
    }


def s_count_tokens():
    resp = client.models.count_tokens(model=MODEL, contents=[user("count_tokens")])
    return {"input_tokens": resp.total_tokens, **headers_of(resp)}


out = {}
for name in SCENARIOS:
    try:
        out[name] = globals()["s_" + name]()
    except Exception as e:  # recorded, so the other scenarios still run
        out[name] = {"exception": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=3)}
out["_sdk"] = {"version": genai.__version__, "paths": PATHS}
print(json.dumps(out))
