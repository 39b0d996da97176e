"""Gemini through `ctxlog proxy` to the fake upstream: the official `google-genai` SDK, pointed at
the proxy with `http_options=HttpOptions(base_url=...)`.

Run by scripts/sdk-proxy-test after sdk_responses_test.py (same venv, same binaries). Checks,
failing loudly:

  a. a 40-call tool loop through `models.generate_content` / `generate_content_stream` (the
     history kept by the script, function responses sent back by hand), and a 15-turn
     `chats.create` conversation with automatic function calling (`send_message` and
     `send_message_stream` in turn: the SDK runs the tool and sends its response itself) are
     each one session that compacted, every call logged;
  b. every request the upstream received equals byte for byte the one ctxlog rebuilds from its
     log (`ctxlog request --call N`), and the client received the upstream's bytes;
  c. the usage recorded for each call (`replay --json`) is the upstream's `usageMetadata`;
  d. `ctxlog verify` passes, and no API key is in the store's files or the proxy's log.
"""

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import time

import httpx2
from google import genai
from google.genai import types

from sdk_proxy_test import CheckFailed, TeeTransport, ctxlog, fail, http_get, no_key_in, sha, start

CALLS = 40
TURNS = 25  # two calls each through the chat's automatic function calling
MODEL = "gemini-2.5-flash"
SYSTEM = "You are a coding agent working in a Rust repository. Use the tools; be brief."
DECLARATIONS = [
    types.FunctionDeclaration(
        name="read_file",
        description="Read a file of the repository",
        parameters=types.Schema(type="OBJECT", properties={"n": types.Schema(type="INTEGER")}, required=["n"]),
    )
]


def tool_output(n):
    return f"// module {n}\n" + "pub fn f() -> u32 { 42 }\n" * 60


def prompt(turn):
    return f"Turn {turn}: look at module {turn} next. [[tool:read_file]]"


def read_file(n: int) -> str:
    """Read a file of the repository."""
    return tool_output(n)


def client_with(key, base_url, tee):
    http = httpx2.Client(transport=tee, timeout=60)
    return genai.Client(api_key=key, http_options=types.HttpOptions(base_url=base_url, httpx_client=http))


def joined(chunks):
    """A stream's content as one model turn: text pieces joined, every other part as it came."""
    parts = []
    for c in chunks:
        for p in (c.candidates[0].content.parts if c.candidates and c.candidates[0].content else None) or []:
            if p.text is not None and not p.thought and parts and parts[-1].text is not None and not parts[-1].thought:
                parts[-1] = types.Part(text=parts[-1].text + p.text)
            else:
                parts.append(p)
    return types.Content(role="model", parts=parts)


def sdk_loop(client, log):
    """generate_content and generate_content_stream in turn; the answer goes back as a model
    turn, each function call gets its response in the next user turn."""
    config = types.GenerateContentConfig(
        system_instruction=SYSTEM,
        tools=[types.Tool(function_declarations=DECLARATIONS)],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        max_output_tokens=256,
    )
    contents = [types.Content(role="user", parts=[types.Part(text=prompt(0))])]
    turn = 0
    for i in range(CALLS):
        if i % 2 == 0:
            r = client.models.generate_content(model=MODEL, contents=contents, config=config)
            content = r.candidates[0].content
        else:
            content = joined(list(client.models.generate_content_stream(model=MODEL, contents=contents, config=config)))
        contents.append(content)
        calls = [p.function_call for p in content.parts if p.function_call]
        if calls:
            contents.append(
                types.Content(
                    role="user",
                    parts=[types.Part.from_function_response(name=c.name, response={"output": tool_output(i)}) for c in calls],
                )
            )
        else:
            turn += 1
            contents.append(types.Content(role="user", parts=[types.Part(text=prompt(turn))]))
        log(f"gemini call {i:2}: {[('call ' + c.name) for c in calls] or 'text'}")


def chat_loop(client, log):
    """The SDK's chat with automatic function calling: it runs `read_file` and sends its
    response itself; `send_message` and `send_message_stream` in turn."""
    chat = client.chats.create(model=MODEL, config=types.GenerateContentConfig(system_instruction=SYSTEM, tools=[read_file]))
    for turn in range(TURNS):
        if turn % 2 == 0:
            text = chat.send_message(prompt(turn)).text
        else:
            text = "".join(c.text or "" for c in chat.send_message_stream(prompt(turn)))
        log(f"chat turn {turn:2}: {text!r}")


def exchanges_of(upstream, key):
    return [x for x in upstream if ":" in x["request"]["path"] and any(key in str(v) for _, v in x["request"]["headers"])]


def body_of(x):
    import base64

    b = x["request"]["body"]
    return b.encode() if isinstance(b, str) else base64.b64decode(b["base64"])


def response_chunks(x):
    import base64

    return b"".join(c.encode() if isinstance(c, str) else base64.b64decode(c["base64"]) for c in x["response"]["chunks"])


def reported(x):
    text = response_chunks(x)
    if text.startswith(b"data:"):
        last = [e for e in text.decode().split("\r\n\r\n") if e.strip()][-1]
        r = json.loads(last[len("data: ") :])
    else:
        r = json.loads(text)
    u = r["usageMetadata"]
    cached = u.get("cachedContentTokenCount", 0)
    return {"input": u["promptTokenCount"] - cached, "cache_read": cached, "cache_write": 0, "output": u["candidatesTokenCount"]}


def check_session(a, store, name, exchanges, calls, tee):
    """One session, every call logged; forwarded == rebuilt; usage == reported; the client got
    the upstream's bytes."""
    if len(exchanges) != calls:
        fail(f"{name}: the upstream got {len(exchanges)} requests for {calls} calls")
    streams = {x.headers.get("x-ctxlog-stream") for x in tee.exchanges} - {None}
    if len(streams) != 1:
        fail(f"{name}: expected one session, got {streams}")
    stream = next(iter(streams))
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
        if sha(tee.exchanges[n].body) != sha(response_chunks(x)):
            fail(f"{name} call {n}: the client did not receive the upstream's bytes")
    compacted = [r for r in records if r["level"] > 0 or r["flush"] is not None or r["edits"]]
    if len(compacted) < 2:
        fail(f"{name}: compaction happened {len(compacted)} time(s); the budget should force it several times")
    cached = [r for r in records if (r.get("usage") or {}).get("cache_read", 0) > 0]
    print(
        f"{name}: session {stream}, {len(records)} calls, compacted on {len(compacted)}, implicit cache hit on "
        f"{len(cached)}; forwarded == rebuilt, usage == reported, client bytes == upstream bytes"
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctxlog", required=True)
    ap.add_argument("--fake", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--budget", type=int, default=6000)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    work = a.work
    store_dir = os.path.join(work, "gemini-store")
    os.makedirs(store_dir, exist_ok=True)
    store = f"sqlite:{store_dir}/proxy.db"
    pids = os.path.join(work, "pids")
    proxy_log = os.path.join(work, "gemini-proxy.log")
    fake_log = os.path.join(work, "gemini-fake.log")
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
        keys = {n: "AIza-ctxlog-test-" + secrets.token_hex(16) for n in ("gemini", "chat")}
        tees = {n: TeeTransport() for n in keys}
        t0 = time.time()
        sdk_loop(client_with(keys["gemini"], proxy_url, tees["gemini"]), say)
        chat_loop(client_with(keys["chat"], proxy_url, tees["chat"]), say)
        print(f"gemini: {CALLS} generate_content calls, {2 * TURNS} chat calls through the proxy in {time.time() - t0:.1f} s")
        upstream = [json.loads(l) for l in http_get(fake_url + "/_fake/requests").decode().splitlines() if l]
        check_session(a, store, "gemini", exchanges_of(upstream, keys["gemini"]), CALLS, tees["gemini"])
        check_session(a, store, "chat", exchanges_of(upstream, keys["chat"]), 2 * TURNS, tees["chat"])
        proxy.send_signal(signal.SIGINT)
        try:
            proxy.wait(timeout=20)
        except subprocess.TimeoutExpired:
            fail("the proxy did not stop within 20 s of SIGINT")
        out = ctxlog(a.ctxlog, "verify", "--store", store)
        print("verify: " + " ".join(out.split())[:200])
        no_key_in(store_dir, proxy_log, list(keys.values()))
        print("sdk-gemini-test: all checks passed")
        return 0
    except (CheckFailed, Exception) as e:
        print(f"\nsdk-gemini-test FAILED: {e}", file=sys.stderr)
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


if __name__ == "__main__":
    sys.exit(main())
