"""The openai SDK against routes with a semantic response cache rule
(data-plane/tests/semantic_cache.rs).

usage: semantic_client.py BASE_URL TOKEN MODEL STEPS

STEPS is a JSON list of steps, each {"prompt", "temperature"?}. Every step sends one chat
completion and records {"status", "cache", "similarity", "text"} (the x-switchyard-cache and
x-switchyard-cache-similarity headers of the raw response, and the answer's text). Prints one JSON
list, one result per step; a step that raises records {"exception": ...}.
"""
import json
import sys

from openai import OpenAI

BASE, TOKEN, MODEL = sys.argv[1], sys.argv[2], sys.argv[3]
STEPS = json.loads(sys.argv[4])

client = OpenAI(base_url=BASE + "/v1", api_key=TOKEN, max_retries=0)
results = []
for step in STEPS:
    try:
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=[{"role": "user", "content": step["prompt"]}],
            temperature=step.get("temperature", 0),
        )
        answer = raw.parse()
        results.append({
            "status": raw.status_code,
            "cache": raw.headers.get("x-switchyard-cache"),
            "similarity": raw.headers.get("x-switchyard-cache-similarity"),
            "text": answer.choices[0].message.content,
        })
    except Exception as e:  # noqa: BLE001 - recorded for the test to judge
        results.append({"exception": f"{type(e).__name__}: {e}"})
print(json.dumps(results))
