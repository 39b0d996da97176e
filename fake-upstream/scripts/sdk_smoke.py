"""Hand-run smoke check (not in CI): the official SDKs parse the fake's streams.
Usage: python sdk_smoke.py http://ADDR   (checked with anthropic 2.14.0, openai 3.57.0)"""
import sys, anthropic, openai, json, urllib.request
class httpx:
    @staticmethod
    def post(u, json=None):
        import json as j
        urllib.request.urlopen(urllib.request.Request(u, data=j.dumps(json).encode(), method="POST")).read()
    @staticmethod
    def get(u):
        class R: pass
        r = R(); r.text = urllib.request.urlopen(u).read().decode(); return r
url = sys.argv[1]
a = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
with a.messages.stream(model="claude-x", max_tokens=50, messages=[{"role":"user","content":"hi"}]) as s:
    text = "".join(s.text_stream)
    m = s.get_final_message()
print("anthropic stream:", repr(text), m.stop_reason, m.usage)
with a.messages.stream(model="claude-x", max_tokens=50, messages=[{"role":"user","content":"hi [[tool:get_w]]"}]) as s:
    m = s.get_final_message()
print("anthropic tool:", m.content, m.stop_reason)
m = a.messages.create(model="claude-x", max_tokens=50, messages=[{"role":"user","content":"hi"}])
print("anthropic json:", m.content[0].text, m.usage)
httpx.post(url + "/_fake/script", json={"fault": {"kind": "status", "status": 429}})
try:
    a.messages.create(model="claude-x", max_tokens=50, messages=[{"role":"user","content":"hi"}]); print("NO ERROR?!")
except anthropic.RateLimitError as e:
    print("anthropic 429 ok:", e.status_code, e.body)
httpx.post(url + "/_fake/script", json={"fault": {"kind": "stream_error", "after_events": 2}})
try:
    with a.messages.stream(model="claude-x", max_tokens=50, messages=[{"role":"user","content":"hi"}]) as s:
        s.get_final_message(); print("NO ERROR?!")
except anthropic.APIStatusError as e:
    print("anthropic stream error ok:", type(e).__name__)
o = openai.OpenAI(base_url=url + "/v1", api_key="sk-oai-test", max_retries=0)
st = o.chat.completions.create(model="gpt-x", messages=[{"role":"user","content":"hi"}], stream=True, stream_options={"include_usage": True})
chunks = list(st)
print("openai stream:", repr("".join(c.choices[0].delta.content or "" for c in chunks if c.choices)), chunks[-1].usage)
st = o.chat.completions.create(model="gpt-x", messages=[{"role":"user","content":"[[tool:f]]"}], stream=True)
tc = [c.choices[0].delta.tool_calls for c in st if c.choices and c.choices[0].delta.tool_calls]
print("openai tool deltas:", len(tc), tc[0][0].function.name)
with o.chat.completions.stream(model="gpt-x", messages=[{"role":"user","content":"[[tool:f]]"}]) as s:
    f = s.get_final_completion()
print("openai tool final:", f.choices[0].message.tool_calls[0].function, f.choices[0].finish_reason)
r = o.chat.completions.create(model="gpt-x", messages=[{"role":"user","content":"hi"}])
print("openai json:", r.choices[0].message.content, r.usage.prompt_tokens, r.usage.prompt_tokens_details.cached_tokens)
httpx.post(url + "/_fake/script", json={"fault": {"kind": "status", "status": 500}})
try:
    o.chat.completions.create(model="gpt-x", messages=[{"role":"user","content":"hi"}]); print("NO ERROR?!")
except openai.InternalServerError as e:
    print("openai 500 ok", e.body)
recs = [json.loads(l) for l in httpx.get(url + "/_fake/requests").text.splitlines()]
print("recorded:", len(recs), [dict(r["request"]["headers"]).get("x-api-key") or dict(r["request"]["headers"]).get("authorization") for r in recs][:2])
