"""OpenAI Responses through `ctxlog proxy` to the fake upstream: the official `openai` SDK's
`responses.create` and `responses.stream`, and the `openai-agents` SDK with its default
(Responses) model.

Run by scripts/sdk-proxy-test after sdk_proxy_test.py (same venv, same binaries). Checks,
failing loudly:

  a. a 44-call tool loop through `responses.create`/`responses.stream` and a 42-call one through
     the Agents SDK (`Runner.run_sync` and `Runner.run_streamed`) are each one session that
     compacted, every call logged;
  b. every request the upstream received equals byte for byte the one ctxlog rebuilds from its
     log (`ctxlog request --call N`), and (openai SDK) the client received the upstream's bytes;
  c. the usage recorded for each call (`replay --json`) is the upstream's;
  d. `previous_response_id` calls reach the upstream as the SDK sent them, are logged in one
     chain session with their usage, and never compacted;
  e. `ctxlog verify` passes, and no API key is in the store's files or the proxy's log.
"""

import argparse
import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import time

import agents
import openai

from sdk_proxy_test import CheckFailed, TeeTransport, ctxlog, fail, http_get, no_key_in, sha, sse_events, start

CALLS = 44
TURNS = 21  # two calls each through the Agents SDK: the tool call, then the answer
MODEL = "gpt-fake-5"
INSTRUCTIONS = "You are a coding agent working in a Rust repository. Use the tools; be brief."
TOOLS = [
    {
        "type": "function",
        "name": "read_file",
        "description": "Read a file of the repository",
        "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    }
]


def tool_output(n):
    return f"// module {n}\n" + "pub fn f() -> u32 { 42 }\n" * 60


def prompt(turn):
    return f"Turn {turn}: look at module {turn} next. [[tool:read_file]]"


def as_items(output):
    return [o.model_dump(exclude_none=True) for o in output]


def sdk_loop(client, log):
    """responses.create and responses.stream in turn; outputs go back as input."""
    items = [{"role": "user", "content": [{"type": "input_text", "text": prompt(0)}]}]
    turn = 0
    for i in range(CALLS):
        kw = dict(model=MODEL, instructions=INSTRUCTIONS, input=items, tools=TOOLS)
        if i % 2 == 0:
            r = client.responses.create(**kw)
        else:
            with client.responses.stream(**kw) as s:
                for _ in s:
                    pass
                r = s.get_final_response()
        out = as_items(r.output)
        items = items + out
        made = [o for o in out if o["type"] == "function_call"]
        for c in made:
            items.append({"type": "function_call_output", "call_id": c["call_id"], "output": tool_output(i)})
        if not made:
            turn += 1
            items.append({"role": "user", "content": prompt(turn)})
        log(f"responses call {i:2}: {[o['type'] for o in out]}")


def chain(client, log):
    """previous_response_id: the provider holds the history; only new input is sent."""
    r = client.responses.create(model=MODEL, instructions=INSTRUCTIONS, input=prompt(0), tools=TOOLS)
    sent = 1
    for i in range(6):
        call = next((o for o in r.output if o.type == "function_call"), None)
        new = (
            [{"type": "function_call_output", "call_id": call.call_id, "output": tool_output(i)}]
            if call
            else [{"role": "user", "content": prompt(i + 1)}]
        )
        r = client.responses.create(model=MODEL, previous_response_id=r.id, input=new, tools=TOOLS)
        sent += 1
        log(f"chain call {i}: {[o.type for o in r.output]}")
    return sent


@agents.function_tool
def read_file(n: int) -> str:
    """Read a file of the repository."""
    return tool_output(n)


def agents_loop(key, base_url, log):
    """The Agents SDK's default model (Responses): `Runner.run` and `Runner.run_streamed` in
    turn, the history carried over with `to_input_list()` (one event loop: the client's
    connections belong to it)."""
    agents.set_tracing_disabled(True)

    async def conversation():
        client = openai.AsyncOpenAI(api_key=key, base_url=base_url, max_retries=0)
        agents.set_default_openai_client(client, use_for_tracing=False)
        agent = agents.Agent(name="coder", instructions=INSTRUCTIONS, tools=[read_file], model=MODEL)
        history = []
        for turn in range(TURNS):
            history = history + [{"role": "user", "content": prompt(turn)}]
            if turn % 2 == 0:
                result = await agents.Runner.run(agent, history)
            else:
                result = agents.Runner.run_streamed(agent, history)
                async for _ in result.stream_events():
                    pass
            history = result.to_input_list()
            log(f"agents turn {turn:2}: {result.final_output!r}")
        await client.close()

    asyncio.run(conversation())


def responses_exchanges(upstream, key):
    return [
        x
        for x in upstream
        if x["request"]["path"].split("?")[0] == "/v1/responses" and any(key in str(v) for _, v in x["request"]["headers"])
    ]


def body_of(x):
    import base64

    b = x["request"]["body"]
    return b.encode() if isinstance(b, str) else base64.b64decode(b["base64"])


def response_chunks(x):
    import base64

    return b"".join(c.encode() if isinstance(c, str) else base64.b64decode(c["base64"]) for c in x["response"]["chunks"])


def reported(x):
    text = response_chunks(x)
    if text.startswith(b"event:"):
        r = [e for e in sse_events(text) if e.get("type") == "response.completed"][-1]["response"]
    else:
        r = json.loads(text)
    u = r["usage"]
    cached = u["input_tokens_details"]["cached_tokens"]
    return {"input": u["input_tokens"] - cached, "cache_read": cached, "cache_write": 0, "output": u["output_tokens"]}


def check_session(a, store, name, exchanges, calls, tee=None, compacts=True):
    """One session, every call logged; forwarded == rebuilt; usage == reported."""
    if len(exchanges) != calls:
        fail(f"{name}: the upstream got {len(exchanges)} requests for {calls} calls")
    stream = a.streams[name]
    lines = ctxlog(a.ctxlog, "replay", "--store", store, "--session", stream, "--json").splitlines()
    records = [json.loads(l) for l in lines if l.strip()]
    if len(records) != calls:
        fail(f"{name}: replay shows {len(records)} calls of session {stream}, the SDK made {calls}")
    tmp = os.path.join(a.work, f"{name}-body.json")
    for n, x in enumerate(exchanges):
        body = body_of(x)
        if x["response"]["status"] != 200 or not x["response"]["complete"]:
            fail(f"{name} call {n}: upstream status {x['response']['status']}")
        with open(tmp, "wb") as f:
            f.write(body)
        rebuilt = ctxlog(a.ctxlog, "request", "--store", store, "--session", stream, "--call", str(n), "--fields-from", tmp, binary=True)
        if sha(rebuilt) != sha(body):
            open(os.path.join(a.work, f"{name}-forwarded.json"), "wb").write(body)
            open(os.path.join(a.work, f"{name}-rebuilt.json"), "wb").write(rebuilt)
            fail(f"{name} call {n}: the forwarded request is not the one rebuilt from the log; both in {a.work}")
        if records[n].get("usage") != reported(x):
            fail(f"{name} call {n}: ctxlog recorded usage {records[n].get('usage')}, the upstream reported {reported(x)}")
        if tee is not None and sha(tee.exchanges[n].body) != sha(response_chunks(x)):
            fail(f"{name} call {n}: the client did not receive the upstream's bytes")
    compacted = [r for r in records if r["level"] > 0 or r["flush"] is not None or r["edits"]]
    if compacts and len(compacted) < 2:
        fail(f"{name}: compaction happened {len(compacted)} time(s); the budget should force it several times")
    if not compacts and compacted:
        fail(f"{name}: a provider-held chain was compacted")
    print(f"{name}: session {stream}, {len(records)} calls, compacted on {len(compacted)}; forwarded == rebuilt, usage == reported")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctxlog", required=True)
    ap.add_argument("--fake", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--budget", type=int, default=6000)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    work = a.work
    store_dir = os.path.join(work, "responses-store")
    os.makedirs(store_dir, exist_ok=True)
    store = f"sqlite:{store_dir}/proxy.db"
    pids = os.path.join(work, "pids")
    proxy_log = os.path.join(work, "responses-proxy.log")
    fake_log = os.path.join(work, "responses-fake.log")
    say = print if a.verbose else (lambda *_: None)
    procs = []
    try:
        fake, fake_url = start([a.fake, "--listen", "127.0.0.1:0"], fake_log, r"listening on (http://\S+)", pids)
        procs.append(fake)
        proxy, proxy_url = start(
            [a.ctxlog, "-v", "proxy", "--upstream", fake_url, "--store", store, "--listen", "127.0.0.1:0", "--budget", str(a.budget)],
            proxy_log,
            r"ctxlog proxy on (http://\S+)",
            pids,
        )
        procs.append(proxy)
        keys = {n: "sk-ctxlog-test-" + secrets.token_hex(16) for n in ("responses", "chain", "agents")}
        tee = TeeTransport()
        client = openai.OpenAI(api_key=keys["responses"], base_url=proxy_url + "/v1", max_retries=0, http_client=openai.DefaultHttpxClient(transport=tee))
        chain_tee = TeeTransport()
        chain_client = openai.OpenAI(api_key=keys["chain"], base_url=proxy_url + "/v1", max_retries=0, http_client=openai.DefaultHttpxClient(transport=chain_tee))
        t0 = time.time()
        sdk_loop(client, say)
        chained = chain(chain_client, say)
        agents_loop(keys["agents"], proxy_url + "/v1", say)
        print(f"responses: {CALLS} openai-SDK calls, {chained} chained, {2 * TURNS} Agents-SDK calls through the proxy in {time.time() - t0:.1f} s")

        upstream = [json.loads(l) for l in http_get(fake_url + "/_fake/requests").decode().splitlines() if l]
        a.streams = {"chain-start": chain_tee.exchanges[0].headers.get("x-ctxlog-stream")}
        # The proxy's answer named the session; the fake's record does not: take it from the tee.
        a.streams["responses"] = one({x.headers.get("x-ctxlog-stream") for x in tee.exchanges}, "responses")
        a.streams["chain"] = one({x.headers.get("x-ctxlog-stream") for x in chain_tee.exchanges[1:]}, "chain")
        agent_ups = responses_exchanges(upstream, keys["agents"])
        agent_streams = agents_streams(a, store, agent_ups)
        a.streams["agents"] = one(agent_streams, "agents")
        check_session(a, store, "responses", responses_exchanges(upstream, keys["responses"]), CALLS, tee=tee)
        check_session(a, store, "agents", agent_ups, 2 * TURNS)
        # (d) the chain: the first call is managed (its own session), the rest provider-held.
        chain_ups = responses_exchanges(upstream, keys["chain"])
        for n, (x, sent) in enumerate(zip(chain_ups[1:], chain_tee.exchanges[1:])):
            if sha(body_of(x)) != sha(sent.request_body):
                fail(f"chain call {n + 1}: the upstream did not get the SDK's request as it was sent")
        stream = a.streams["chain"]
        records = [json.loads(l) for l in ctxlog(a.ctxlog, "replay", "--store", store, "--session", stream, "--json").splitlines() if l.strip()]
        if len(records) != chained - 1:
            fail(f"chain: replay shows {len(records)} calls, {chained - 1} continued a stored response")
        for r, x in zip(records, chain_ups[1:]):
            if r.get("usage") != reported(x) or r["level"] > 0 or r["flush"] is not None or r["edits"]:
                fail(f"chain call {r['call']}: usage {r.get('usage')} vs {reported(x)}, or it was compacted")
        print(f"chain: session {stream}, {len(records)} previous_response_id calls logged and passed through byte for byte")

        proxy.send_signal(signal.SIGINT)
        try:
            proxy.wait(timeout=20)
        except subprocess.TimeoutExpired:
            fail("the proxy did not stop within 20 s of SIGINT")
        out = ctxlog(a.ctxlog, "verify", "--store", store)
        print("verify: " + " ".join(out.split())[:200])
        no_key_in(store_dir, proxy_log, list(keys.values()))
        print("sdk-responses-test: all checks passed")
        return 0
    except (CheckFailed, Exception) as e:
        print(f"\nsdk-responses-test FAILED: {e}", file=sys.stderr)
        if not isinstance(e, CheckFailed):
            import traceback

            traceback.print_exc()
        for name, path in (("proxy", proxy_log), ("fake upstream", fake_log)):
            if os.path.exists(path):
                text = open(path, errors="replace").read()
                print(f"\n---- {name} log ({path}, last 40 lines) ----", file=sys.stderr)
                print("\n".join(text.splitlines()[-40:]), file=sys.stderr)
        return 1
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def one(streams, name):
    streams = set(streams) - {None}
    if len(streams) != 1:
        fail(f"{name}: expected one session, got {streams}")
    return next(iter(streams))


def agents_streams(a, store, ups):
    """The sessions the Agents SDK's calls went to: the one whose replay has as many calls."""
    out = json.loads(ctxlog(a.ctxlog, "sessions", "--store", store, "--json"))
    known = set(a.streams.values())
    return {s["session"] for s in out if s["session"] not in known and s["calls"] > 0}


if __name__ == "__main__":
    sys.exit(main())
