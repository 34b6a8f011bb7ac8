"""The official OpenAI, Anthropic and Google GenAI Python SDKs against guardrails
(data-plane/tests/guardrails.rs).

usage: guardrail_client.py BASE_URL TOKEN BLOCKED_MODEL STREAM_MODEL PROMPT

Prints one JSON line. For each SDK: "<sdk>_request" is what a plain call on BLOCKED_MODEL with
PROMPT raised (its class, status, code and message) and "<sdk>_stream" what iterating a stream
on STREAM_MODEL gave: the text received before the error and what was raised.
"""
import json
import sys

import anthropic
import openai
from google import genai
from google.genai import errors, types

BASE, TOKEN, BLOCKED, STREAMED, PROMPT = sys.argv[1:6]


def raised(e):
    return {
        "class": type(e).__name__,
        "status": getattr(e, "status_code", None) or getattr(e, "code", None),
        "code": getattr(e, "code", None) if isinstance(e, openai.APIError) else None,
        "message": str(getattr(e, "message", e)),
    }


def openai_calls(out):
    client = openai.OpenAI(base_url=BASE + "/v1", api_key=TOKEN, max_retries=0)
    messages = [{"role": "user", "content": PROMPT}]
    try:
        client.chat.completions.create(model=BLOCKED, messages=messages)
        out["openai_request"] = "no error"
    except openai.APIError as e:
        out["openai_request"] = raised(e)
    text = ""
    try:
        stream = client.chat.completions.create(
            model=STREAMED, messages=[{"role": "user", "content": "hi"}], stream=True
        )
        for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
        out["openai_stream"] = {"text": text, "raised": None}
    except openai.APIError as e:
        out["openai_stream"] = {"text": text, "raised": raised(e)}


def anthropic_calls(out):
    client = anthropic.Anthropic(base_url=BASE, api_key=TOKEN, max_retries=0)
    messages = [{"role": "user", "content": PROMPT}]
    try:
        client.messages.create(model=BLOCKED, max_tokens=64, messages=messages)
        out["anthropic_request"] = "no error"
    except anthropic.APIError as e:
        out["anthropic_request"] = raised(e)
    text = ""
    try:
        with client.messages.stream(
            model=STREAMED, max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            for delta in stream.text_stream:
                text += delta
        out["anthropic_stream"] = {"text": text, "raised": None}
    except anthropic.APIError as e:
        out["anthropic_stream"] = {"text": text, "raised": raised(e)}


def genai_calls(out):
    client = genai.Client(
        api_key=TOKEN,
        http_options=types.HttpOptions(
            base_url=BASE, timeout=20_000, retry_options=types.HttpRetryOptions(attempts=1)
        ),
    )
    try:
        client.models.generate_content(model=BLOCKED, contents=PROMPT)
        out["genai_request"] = "no error"
    except errors.APIError as e:
        out["genai_request"] = raised(e)
    text = ""
    try:
        for resp in client.models.generate_content_stream(model=STREAMED, contents="hi"):
            text += resp.text or ""
        out["genai_stream"] = {"text": text, "raised": None}
    except errors.APIError as e:
        out["genai_stream"] = {"text": text, "raised": raised(e)}


out = {}
for calls in (openai_calls, anthropic_calls, genai_calls):
    calls(out)
print(json.dumps(out))
