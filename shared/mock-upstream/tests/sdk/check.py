#!/usr/bin/env python3
"""Checks that the official openai and anthropic Python SDKs accept every mock answer.

Not part of `cargo test` (it needs `pip install openai anthropic`). Run against a mock binary:
    MOCK_LISTEN=127.0.0.1:19123 target/debug/switchyard-mock-upstream &
    curl -s -XPOST localhost:19123/__mock/rules -d '{"matcher":{"model":"fail"},"behavior":{"status":500}}'
    python3 shared/mock-upstream/tests/sdk/check.py http://127.0.0.1:19123
"""
import io, sys, openai, anthropic
base = sys.argv[1]
c = openai.OpenAI(base_url=base + "/v1", api_key="sk-test", max_retries=0)
r = c.chat.completions.create(model="gpt-x", messages=[{"role": "user", "content": "hi"}])
assert r.choices[0].message.content == "Hello from mock", r
assert r.model == "gpt-x"
text = "".join((ch.choices[0].delta.content or "") for ch in c.chat.completions.create(model="gpt-x", messages=[{"role":"user","content":"hi"}], stream=True) if ch.choices)
assert text == "Hello from mock", text
chunks = list(c.chat.completions.create(model="gpt-x", messages=[{"role":"user","content":"hi"}], stream=True, stream_options={"include_usage": True}))
assert chunks[-1].usage.total_tokens > 0
e = c.embeddings.create(model="emb", input=["a", "b"])
assert len(e.data) == 2 and len(e.data[0].embedding) == 8, e
e = c.embeddings.create(model="emb", input="a", encoding_format="float")
assert len(e.data[0].embedding) == 8
assert any(m.id == "mock-model" for m in c.models.list())
assert c.models.retrieve("mock-model").id == "mock-model"
assert c.completions.create(model="c", prompt="x").choices[0].text == "Hello from mock"
assert "".join(x.choices[0].text for x in c.completions.create(model="c", prompt="x", stream=True)) == "Hello from mock"
resp = c.responses.create(model="r", input="hi")
assert resp.output_text == "Hello from mock", resp
with c.responses.stream(model="r", input="hi") as s:
    for _ in s: pass
    final = s.get_final_response()
assert final.output_text == "Hello from mock"
img = c.images.generate(model="dall-e-3", prompt="cat")
assert img.data[0].b64_json
sp = c.audio.speech.create(model="tts-1", voice="alloy", input="hi")
assert len(sp.content) > 100
tr = c.audio.transcriptions.create(model="whisper-1", file=("a.mp3", io.BytesIO(b"ID3abc")))
assert tr.text == "Hello from mock"
try:
    c.chat.completions.create(model="fail", messages=[])
    raise SystemExit("expected error")
except openai.InternalServerError as err:
    assert err.status_code == 500 and err.body["message"], err.body
a = anthropic.Anthropic(base_url=base, api_key="sk-ant", max_retries=0)
m = a.messages.create(model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
assert m.content[0].text == "Hello from mock" and m.model == "claude-x"
with a.messages.stream(model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "hi"}]) as s:
    assert "".join(s.text_stream) == "Hello from mock"
    assert s.get_final_message().stop_reason == "end_turn"
try:
    a.messages.create(model="fail", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    raise SystemExit("expected error")
except anthropic.InternalServerError as err:
    assert err.status_code == 500
print("SDK OK")
