"""The official OpenAI Python SDK's Responses API streams under guardrails
(data-plane/tests/guardrails.rs).

usage: guardrail_responses.py BASE_URL TOKEN MODEL PROMPT

Prints one JSON line: for `client.responses.stream` ("helper") and `create(stream=True)`
("events"), the text of the deltas, of each closing event that repeats the text
(`response.output_text.done`, `response.content_part.done`, `response.output_item.done`,
`response.completed`) and the final response's `output_text`.
"""
import json
import sys

import openai

BASE, TOKEN, MODEL, PROMPT = sys.argv[1:5]
client = openai.OpenAI(base_url=BASE + "/v1", api_key=TOKEN, max_retries=0)


def texts(events):
    seen = {"deltas": ""}
    for event in events:
        kind = event.type
        if kind == "response.output_text.delta":
            seen["deltas"] += event.delta
        elif kind == "response.output_text.done":
            seen[kind] = event.text
        elif kind == "response.content_part.done":
            seen[kind] = event.part.text
        elif kind == "response.output_item.done":
            seen[kind] = "".join(c.text for c in event.item.content if c.type == "output_text")
        elif kind == "response.completed":
            seen[kind] = event.response.output_text
    return seen


out = {}
with client.responses.stream(model=MODEL, input=PROMPT) as stream:
    out["helper"] = texts(stream)
    out["helper"]["final"] = stream.get_final_response().output_text
out["events"] = texts(client.responses.create(model=MODEL, input=PROMPT, stream=True))
print(json.dumps(out))
