"""The official SDKs (openai, anthropic, google-genai) against a route with a response cache rule
(data-plane/tests/response_cache.rs).

usage: cache_client.py SDK BASE_URL TOKEN MODEL STEPS

SDK is openai (chat completions), openai-completions (legacy completions), openai-responses
(the Responses API, stateless: store=False), anthropic or genai.

STEPS is a JSON list of steps, each {"prompt", "stream", "temperature"?, "cache_control"?}. Every
step sends one request with the SDK and records {"cache", "age", "text", "finish"} (the
x-switchyard-cache and Age headers of the SDK's raw response, or its HTTP client's for google-genai, the answer's text and stop reason,
a streamed answer read piece by piece). Prints one JSON list, one result per step; a step that
raises records {"exception": ...}.
"""
import json
import sys

SDK, BASE, TOKEN, MODEL = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
STEPS = json.loads(sys.argv[5])
SEEN = []


def on_response(response):
    SEEN.append((response.headers.get("x-switchyard-cache"), response.headers.get("age")))


def raw(create, **kw):
    """One SDK call through its raw-response `create`: the headers noted, the answer (or the
    stream) parsed."""
    response = create(**kw)
    on_response(response)
    return response.parse()


def extra(step):
    return {"Cache-Control": step["cache_control"]} if step.get("cache_control") else {}


def openai_step(step):
    from openai import OpenAI

    client = OpenAI(base_url=BASE + "/v1", api_key=TOKEN, max_retries=0)
    kw = dict(
        model=MODEL,
        messages=[{"role": "user", "content": step["prompt"]}],
        temperature=step.get("temperature", 0),
        extra_headers=extra(step),
    )
    if not step["stream"]:
        answer = raw(client.chat.completions.with_raw_response.create, **kw)
        return answer.choices[0].message.content, answer.choices[0].finish_reason
    pieces, finish = [], None
    stream = raw(client.chat.completions.with_raw_response.create, stream=True, **kw)
    for chunk in stream:
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
            finish = choice.finish_reason or finish
    return "".join(pieces), finish


def completions_step(step):
    from openai import OpenAI

    client = OpenAI(base_url=BASE + "/v1", api_key=TOKEN, max_retries=0)
    kw = dict(
        model=MODEL,
        prompt=step["prompt"],
        max_tokens=64,
        temperature=step.get("temperature", 0),
        extra_headers=extra(step),
    )
    if not step["stream"]:
        answer = raw(client.completions.with_raw_response.create, **kw)
        return answer.choices[0].text, answer.choices[0].finish_reason
    pieces, finish = [], None
    stream = raw(client.completions.with_raw_response.create, stream=True, **kw)
    for chunk in stream:
        for choice in chunk.choices:
            pieces.append(choice.text)
            finish = choice.finish_reason or finish
    return "".join(pieces), finish


def responses_step(step):
    from openai import OpenAI

    client = OpenAI(base_url=BASE + "/v1", api_key=TOKEN, max_retries=0)
    kw = dict(
        model=MODEL,
        input=step["prompt"],
        store=False,
        temperature=step.get("temperature", 0),
        extra_headers=extra(step),
    )
    if not step["stream"]:
        answer = raw(client.responses.with_raw_response.create, **kw)
        return answer.output_text, answer.status
    pieces, done, status = [], [], None
    stream = raw(client.responses.with_raw_response.create, stream=True, **kw)
    for event in stream:
        if event.type == "response.output_text.delta":
            pieces.append(event.delta)
        elif event.type == "response.output_text.done":
            done.append(event.text)
        elif event.type == "response.completed":
            status = event.response.status
            # The whole answer the last event carries says what the deltas said.
            if event.response.output_text != "".join(pieces) or done != ["".join(pieces)]:
                raise AssertionError(f"deltas {pieces!r}, done {done!r}, completed {event.response.output_text!r}")
    return "".join(pieces), status


def anthropic_step(step):
    import anthropic

    client = anthropic.Anthropic(base_url=BASE, api_key=TOKEN, max_retries=0)
    kw = dict(
        model=MODEL,
        max_tokens=256,
        messages=[{"role": "user", "content": step["prompt"]}],
        # Sent as a body field: the newest SDKs no longer take it as an argument.
        extra_body={"temperature": step.get("temperature", 0)},
        extra_headers=extra(step),
    )
    if not step["stream"]:
        msg = raw(client.messages.with_raw_response.create, **kw)
        return "".join(b.text for b in msg.content if b.type == "text"), msg.stop_reason
    pieces, stop = [], None
    stream = raw(client.messages.with_raw_response.create, stream=True, **kw)
    for event in stream:
        if event.type == "content_block_delta" and event.delta.type == "text_delta":
            pieces.append(event.delta.text)
        elif event.type == "message_delta":
            stop = event.delta.stop_reason
    return "".join(pieces), stop


def genai_step(step):
    from google import genai
    from google.genai import types

    client = genai.Client(
        api_key=TOKEN,
        http_options=types.HttpOptions(
            base_url=BASE,
            timeout=20_000,
            retry_options=types.HttpRetryOptions(attempts=1),
            headers=extra(step),
            client_args={"event_hooks": {"response": [on_response]}},
        ),
    )
    config = types.GenerateContentConfig(temperature=step.get("temperature", 0))
    if not step["stream"]:
        answer = client.models.generate_content(model=MODEL, contents=step["prompt"], config=config)
        return answer.text, str(answer.candidates[0].finish_reason)
    pieces, finish = [], None
    for chunk in client.models.generate_content_stream(model=MODEL, contents=step["prompt"], config=config):
        if chunk.text:
            pieces.append(chunk.text)
        if chunk.candidates and chunk.candidates[0].finish_reason:
            finish = str(chunk.candidates[0].finish_reason)
    return "".join(pieces), finish


RUN = {
    "openai": openai_step,
    "openai-completions": completions_step,
    "openai-responses": responses_step,
    "anthropic": anthropic_step,
    "genai": genai_step,
}[SDK]
results = []
for step in STEPS:
    SEEN.clear()
    try:
        text, finish = RUN(step)
        cache, age = SEEN[-1] if SEEN else (None, None)
        results.append({"cache": cache, "age": age, "text": text, "finish": finish})
    except Exception as e:  # noqa: BLE001 - recorded for the test to judge
        results.append({"exception": f"{type(e).__name__}: {e}"})
print(json.dumps(results))
