"""The official OpenAI Python SDK as a Switchyard client (data-plane/tests/sdk_matrix.rs).

usage: openai_client.py BASE_URL TOKEN MODEL SCENARIO[,SCENARIO...]

Prints one JSON line: {scenario: result}. A scenario that raises records
{"exception": ...} instead of stopping the others. Models used, from MODEL:
MODEL (text answers), MODEL-tools (tool calls), MODEL-429, MODEL-503, no-such-model.
"""
import base64
import json
import sys
import traceback

import openai
from openai import OpenAI

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
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The current weather of a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]

client = OpenAI(base_url=BASE + "/v1", api_key=TOKEN, max_retries=0, timeout=20)


def messages(scenario, *extra):
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"scenario={scenario}: what is the weather in Paris?"},
        *extra,
    ]


def headers_of(raw):
    return {
        "channel": raw.headers.get("x-switchyard-channel"),
        "attempts": raw.headers.get("x-switchyard-attempts"),
    }


def usage_of(u):
    if u is None:
        return None
    details = getattr(u, "prompt_tokens_details", None)
    return {
        "input": u.prompt_tokens,
        "output": u.completion_tokens,
        "cached": getattr(details, "cached_tokens", None) if details is not None else None,
    }


def calls_of(message):
    return [
        {"id": c.id, "name": c.function.name, "arguments": json.loads(c.function.arguments or "{}")}
        for c in (message.tool_calls or [])
    ]


def complete(model, msgs, **kw):
    raw = client.chat.completions.with_raw_response.create(model=model, messages=msgs, **kw)
    chat = raw.parse()
    choice = chat.choices[0]
    return {
        "text": choice.message.content,
        "tool_calls": calls_of(choice.message),
        "stop": choice.finish_reason,
        "usage": usage_of(chat.usage),
        "model": chat.model,
        **headers_of(raw),
    }


def stream(model, msgs, **kw):
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=msgs, stream=True, stream_options={"include_usage": True}, **kw
    )
    pieces, calls, stop, usage, chunks = [], {}, None, None, 0
    for chunk in raw.parse():
        chunks += 1
        if chunk.usage is not None:
            usage = usage_of(chunk.usage)
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                pieces.append(delta.content)
            for tc in delta.tool_calls or []:
                call = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": "", "pieces": 0})
                if tc.id:
                    call["id"] = tc.id
                if tc.function and tc.function.name:
                    call["name"] = tc.function.name
                if tc.function and tc.function.arguments:
                    call["arguments"] += tc.function.arguments
                    call["pieces"] += 1
            if choice.finish_reason:
                stop = choice.finish_reason
    tool_calls = []
    for _, c in sorted(calls.items()):
        c["arguments"] = json.loads(c["arguments"] or "{}")
        tool_calls.append(c)
    return {
        "pieces": pieces,
        "text": "".join(pieces),
        "tool_calls": tool_calls,
        "stop": stop,
        "usage": usage,
        "chunks": chunks,
        "completed": stop is not None,
        **headers_of(raw),
    }


def error_of(fn):
    try:
        fn()
        return {"status": None, "exception": None}
    except openai.APIStatusError as e:
        body = e.body if isinstance(e.body, dict) else {}
        err = body.get("error", body) if isinstance(body, dict) else {}
        return {
            "status": e.status_code,
            "exception": type(e).__name__,
            "type": err.get("type") if isinstance(err, dict) else None,
            "code": err.get("code") if isinstance(err, dict) else None,
            "message": e.message,
            "retry_after": e.response.headers.get("retry-after"),
            "channel": e.response.headers.get("x-switchyard-channel"),
            "attempts": e.response.headers.get("x-switchyard-attempts"),
            "should_retry": e.response.headers.get("x-should-retry"),
        }


def s_text():
    return complete(MODEL, messages("text"))


def s_stream():
    return stream(MODEL, messages("stream"))


def s_tools():
    return complete(MODEL + "-tools", messages("tools"), tools=TOOLS)


def s_tools_stream():
    return stream(MODEL + "-tools", messages("tools_stream"), tools=TOOLS)


def s_tool_result():
    first = complete(MODEL + "-tools", messages("tool_result"), tools=TOOLS)
    call = first["tool_calls"][0]
    assistant = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])},
            }
        ],
    }
    tool = {"role": "tool", "tool_call_id": call["id"], "content": TOOL_RESULT}
    second = complete(MODEL, messages("tool_result", assistant, tool), tools=TOOLS)
    return {"first_id": call["id"], "first": first, **second}


def s_image():
    data = base64.b64encode(PNG).decode()
    content = [
        {"type": "text", "text": "scenario=image: describe these images"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}},
        {"type": "image_url", "image_url": {"url": IMAGE_URL}},
    ]
    return complete(MODEL, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": content}])


def s_errors():
    msgs = messages("errors")
    bad = OpenAI(base_url=BASE + "/v1", api_key="sk-not-a-switchyard-token", max_retries=0, timeout=20)
    return {
        "bad_token": error_of(lambda: bad.chat.completions.create(model=MODEL, messages=msgs)),
        "unknown_model": error_of(lambda: client.chat.completions.create(model="no-such-model", messages=msgs)),
        "rate_limited": error_of(lambda: client.chat.completions.create(model=MODEL + "-429", messages=msgs)),
        "unavailable": error_of(lambda: client.chat.completions.create(model=MODEL + "-503", messages=msgs)),
    }


def s_n2():
    # Two choices: a feature some upstream protocols cannot express.
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=messages("n2"), n=2)
    chat = raw.parse()
    return {"choices": [c.message.content for c in chat.choices], **headers_of(raw)}


def s_n2_error():
    return error_of(lambda: client.chat.completions.create(model=MODEL, messages=messages("n2"), n=2))


def response_input(scenario):
    return f"scenario={scenario}: what is the weather in Paris?"


RESPONSE_TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The current weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]


def response_usage(u):
    if u is None:
        return None
    return {
        "input": u.input_tokens,
        "output": u.output_tokens,
        "cached": u.input_tokens_details.cached_tokens if u.input_tokens_details else None,
        "reasoning": u.output_tokens_details.reasoning_tokens if u.output_tokens_details else None,
    }


def response_result(raw):
    resp = raw.parse()
    return {
        "text": resp.output_text,
        "status": resp.status,
        "store": getattr(resp, "store", None),
        "object": getattr(resp, "object", None),
        "output_types": [item.type for item in resp.output],
        "calls": [
            {"call_id": item.call_id, "name": item.name, "arguments": json.loads(item.arguments)}
            for item in resp.output
            if item.type == "function_call"
        ],
        "usage": response_usage(resp.usage),
        **headers_of(raw),
    }


def s_responses():
    # The Responses API, stateless (no `background`): the SDK sends no Idempotency-Key.
    raw = client.responses.with_raw_response.create(
        model=MODEL, instructions=SYSTEM, input=response_input("responses"), max_output_tokens=300
    )
    return response_result(raw)


def s_responses_tools():
    raw = client.responses.with_raw_response.create(
        model=MODEL + "-tools", instructions=SYSTEM, input=response_input("responses_tools"), tools=RESPONSE_TOOLS
    )
    return response_result(raw)


def s_responses_tool_result():
    # The agent loop: the first answer's output items go back as input, with the call's output.
    first = client.responses.create(
        model=MODEL + "-tools",
        instructions=SYSTEM,
        input=[{"role": "user", "content": response_input("responses_tool_result")}],
        tools=RESPONSE_TOOLS,
    )
    call = next(item for item in first.output if item.type == "function_call")
    history = [{"role": "user", "content": response_input("responses_tool_result")}]
    history += [item.model_dump(exclude_none=True) for item in first.output]
    history.append({"type": "function_call_output", "call_id": call.call_id, "output": TOOL_RESULT})
    raw = client.responses.with_raw_response.create(
        model=MODEL, instructions=SYSTEM, input=history, tools=RESPONSE_TOOLS
    )
    return {"first_call_id": call.call_id, **response_result(raw)}


def s_responses_schema():
    # Structured output: a JSON schema for the answer's text.
    raw = client.responses.with_raw_response.create(
        model=MODEL,
        input=response_input("responses_schema"),
        text={
            "format": {
                "type": "json_schema",
                "name": "weather",
                "strict": True,
                "schema": {
                    "type": "object",
                    "properties": {"summary": {"type": "string"}},
                    "required": ["summary"],
                    "additionalProperties": False,
                },
            }
        },
    )
    return response_result(raw)


def s_responses_continued():
    raw = client.responses.with_raw_response.create(
        model=MODEL, input=response_input("responses_continued"), previous_response_id="resp_123"
    )
    return response_result(raw)


def streamed(model, scenario, tools=None):
    # The SDK's stream helper checks the event order as it accumulates the response.
    types, pieces, args = [], [], []
    kwargs = {"tools": tools} if tools else {}
    with client.responses.stream(
        model=model, instructions=SYSTEM, input=response_input(scenario), **kwargs
    ) as stream:
        for event in stream:
            types.append(event.type)
            if event.type == "response.output_text.delta":
                pieces.append(event.delta)
            elif event.type == "response.function_call_arguments.delta":
                args.append(event.delta)
        final = stream.get_final_response()
    return {
        "types": types,
        "pieces": pieces,
        "argument_pieces": args,
        "text": final.output_text,
        "status": final.status,
        "store": getattr(final, "store", None),
        "calls": [
            {"call_id": item.call_id, "name": item.name, "arguments": json.loads(item.arguments)}
            for item in final.output
            if item.type == "function_call"
        ],
        "usage": response_usage(final.usage),
    }


def s_responses_stream():
    return streamed(MODEL, "responses_stream")


def s_responses_tools_stream():
    return streamed(MODEL + "-tools", "responses_tools_stream", RESPONSE_TOOLS)


def s_responses_previous():
    return error_of(
        lambda: client.responses.create(
            model=MODEL, input=response_input("responses_previous"), previous_response_id="resp_123"
        )
    )


def s_responses_error():
    return error_of(lambda: client.responses.create(model=MODEL, input=response_input("responses_error")))


def s_responses_background():
    return error_of(
        lambda: client.responses.create(model=MODEL, input=response_input("responses_background"), background=True)
    )


out = {}
for name in SCENARIOS:
    try:
        out[name] = globals()["s_" + name]()
    except Exception as e:  # recorded, so the other scenarios still run
        out[name] = {"exception": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=3)}
print(json.dumps(out))
