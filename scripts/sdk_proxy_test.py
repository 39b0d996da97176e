"""The official Anthropic and OpenAI Python SDKs through `ctxlog proxy` to the fake upstream.

Run by scripts/sdk-proxy-test (which builds the binaries and the venv). Starts
`ctxlog-fake-upstream` and `ctxlog proxy` (small budget: compaction happens several times),
runs a 60-call agent conversation through each SDK (streaming and not, tool use, an image, long
tool results), then checks, failing loudly:

  a. every request the upstream received equals byte for byte (sha256) the request ctxlog
     rebuilds from its log for that session and call (`ctxlog request`);
  b. the client received exactly the upstream's bytes, every call (a tee under the SDK's HTTP
     client; plus the SDK's own raw-response APIs on the calls made through them);
  c. the usage ctxlog recorded for each call (`ctxlog replay --json`) is the usage the upstream
     reported in that exchange;
  d. `ctxlog verify` passes;
  e. the API keys are absent from every file of the store directory and from the proxy's log;
  f. each SDK's conversation is one session (header-named and derived), and both compacted.
"""

import argparse
import base64
import hashlib
import json
import os
import re
import secrets
import signal
import struct
import subprocess
import sys
import threading
import time
import urllib.request
import zlib

import anthropic
import httpx2
import openai

CALLS = 60
MODEL_A = "claude-fake-4"
MODEL_O = "gpt-fake-5"
SYSTEM = "You are a coding agent working in a Rust repository. Use the tools; be brief."


class CheckFailed(Exception):
    pass


def fail(msg):
    raise CheckFailed(msg)


# ---- HTTP tee: what the SDK sent and received, below the SDK ---------------------------------


class Exchange:
    def __init__(self, request_body):
        self.request_body = request_body
        self.status = None
        self.headers = {}
        self.chunks = []

    @property
    def body(self):
        return b"".join(self.chunks)


class TeeStream(httpx2.SyncByteStream):
    def __init__(self, inner, exchange):
        self.inner = inner
        self.exchange = exchange

    def __iter__(self):
        for chunk in self.inner:
            self.exchange.chunks.append(bytes(chunk))
            yield chunk

    def close(self):
        self.inner.close()


class TeeTransport(httpx2.BaseTransport):
    """Records each request body and each response's bytes as the client reads them."""

    def __init__(self):
        self.inner = httpx2.HTTPTransport()
        self.exchanges = []

    def handle_request(self, request):
        x = Exchange(request.read())
        self.exchanges.append(x)
        resp = self.inner.handle_request(request)
        x.status = resp.status_code
        x.headers = {k.lower(): v for k, v in resp.headers.items()}
        return httpx2.Response(
            status_code=resp.status_code,
            headers=resp.headers,
            stream=TeeStream(resp.stream, x),
            extensions=resp.extensions,
            request=request,
        )

    def close(self):
        self.inner.close()


# ---- The agent's world ----------------------------------------------------------------------


def png(width=16, height=16):
    """A small valid PNG (RGB gradient)."""
    raw = b"".join(b"\x00" + b"".join(bytes((x * 16 % 256, y * 16 % 256, 128)) for x in range(width)) for y in range(height))

    def chunk(kind, data):
        c = kind + data
        return struct.pack(">I", len(data)) + c + struct.pack(">I", zlib.crc32(c) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


IMAGE_B64 = base64.b64encode(png()).decode()


def tool_output(name, n):
    """A long-ish tool result (about 2.4 KB): what makes the history outgrow the budget."""
    lines = [f"// {name} #{n}: src/module_{n}.rs"]
    for i in range(40):
        lines.append(f"pub fn step_{n}_{i}(x: u64) -> u64 {{ x.wrapping_mul({i + 3}).rotate_left({n % 7}) }}")
    return "\n".join(lines)


def prompt(turn):
    """The user's next instruction: most ask for a tool, some do not."""
    if turn % 5 == 4:
        return f"Turn {turn}: summarize what you found so far in one line."
    tool = "read_file" if turn % 2 == 0 else "run_tests"
    return f"Turn {turn}: look at module {turn} next. [[tool:{tool}]]"


# ---- SSE decoding for the calls read as raw bytes -----------------------------------------------


def sse_events(raw):
    for block in raw.decode().split("\n\n"):
        data = [line[6:] for line in block.split("\n") if line.startswith("data: ")]
        if data and data[0] != "[DONE]":
            yield json.loads("\n".join(data))


# ---- Anthropic --------------------------------------------------------------------------------

A_TOOLS = [
    {"name": n, "description": f"{n} in the repository", "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}
    for n in ("read_file", "run_tests")
]


def anthropic_call(client, mode, messages, calls):
    """One model call in `mode`; returns the assistant content blocks (as request params)."""
    kw = dict(model=MODEL_A, max_tokens=1024, system=SYSTEM, tools=A_TOOLS, messages=messages)
    if mode == "raw":
        r = client.messages.with_raw_response.create(**kw)
        calls.append({"sdk_raw": r.read(), "stream_header": r.headers.get("x-ctxlog-stream")})
        msg = r.parse()
        blocks = [b.model_dump(exclude_none=True) for b in msg.content]
    elif mode == "helper":
        with client.messages.stream(**kw) as s:
            msg = s.get_final_message()
        calls.append({})
        blocks = [b.model_dump(exclude_none=True) for b in msg.content]
    elif mode == "events":
        blocks, cur = [], None
        for ev in client.messages.create(stream=True, **kw):
            if ev.type == "content_block_start":
                cur = ev.content_block.model_dump(exclude_none=True)
                cur["_json"] = ""
            elif ev.type == "content_block_delta" and ev.delta.type == "text_delta":
                cur["text"] += ev.delta.text
            elif ev.type == "content_block_delta" and ev.delta.type == "input_json_delta":
                cur["_json"] += ev.delta.partial_json
            elif ev.type == "content_block_stop":
                blocks.append(cur)
        calls.append({})
    else:  # "streamed_raw": with_streaming_response, the bytes read by us
        with client.messages.with_streaming_response.create(stream=True, **kw) as r:
            raw = b"".join(r.iter_bytes())
            calls.append({"sdk_raw": raw, "stream_header": r.headers.get("x-ctxlog-stream")})
        blocks, cur = [], None
        for ev in sse_events(raw):
            if ev["type"] == "content_block_start":
                cur = dict(ev["content_block"], _json="")
            elif ev["type"] == "content_block_delta":
                d = ev["delta"]
                if d["type"] == "text_delta":
                    cur["text"] += d["text"]
                else:
                    cur["_json"] += d["partial_json"]
            elif ev["type"] == "content_block_stop":
                blocks.append(cur)
    out = []
    for b in blocks:
        j = b.pop("_json", "")
        if b["type"] == "tool_use" and j:
            b["input"] = json.loads(j)
        out.append({k: v for k, v in b.items() if k in ("type", "text", "id", "name", "input")})
    return out


def anthropic_agent(client, calls, log):
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Here is the failing screenshot. " + prompt(0)},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": IMAGE_B64}},
            ],
        }
    ]
    modes = ["raw", "helper", "events", "streamed_raw"]
    turn = 0
    for i in range(CALLS):
        if i > 0:
            last = messages[-1]["content"]
            uses = [b for b in last if b["type"] == "tool_use"]
            if uses:  # the agent runs the tools and sends their results
                messages.append(
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": u["id"], "content": tool_output(u["name"], i)} for u in uses
                        ],
                    }
                )
            else:
                turn += 1
                messages.append({"role": "user", "content": prompt(turn)})
        content = anthropic_call(client, modes[i % 4], messages, calls)
        if not content:
            fail(f"anthropic call {i}: empty answer")
        messages.append({"role": "assistant", "content": content})
        log(f"anthropic call {i:2} ({modes[i % 4]:12}): {[b.get('name') or b.get('text') for b in content]}")


# ---- OpenAI -----------------------------------------------------------------------------------

O_TOOLS = [
    {"type": "function", "function": {"name": n, "description": f"{n} in the repository", "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}}}}
    for n in ("read_file", "run_tests")
]


def openai_call(client, mode, messages, calls):
    """One model call in `mode`; returns the assistant message (as a request param)."""
    kw = dict(model=MODEL_O, messages=messages, tools=O_TOOLS)
    if mode == "raw":
        r = client.chat.completions.with_raw_response.create(**kw)
        calls.append({"sdk_raw": r.content, "stream_header": r.headers.get("x-ctxlog-stream")})
        m = r.parse().choices[0].message
        out = {"role": "assistant", "content": m.content}
        if m.tool_calls:
            out["tool_calls"] = [
                {"id": t.id, "type": "function", "function": {"name": t.function.name, "arguments": t.function.arguments}}
                for t in m.tool_calls
            ]
        return out
    if mode == "events":
        chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
        calls.append({})
        deltas = [c.choices[0].delta.model_dump(exclude_none=True) for c in chunks if c.choices]
        if chunks[-1].usage is None:
            fail("openai stream: no usage chunk although include_usage was asked for")
    else:  # "streamed_raw"
        with client.chat.completions.with_streaming_response.create(
            stream=True, stream_options={"include_usage": True}, **kw
        ) as r:
            raw = b"".join(r.iter_bytes())
            calls.append({"sdk_raw": raw, "stream_header": r.headers.get("x-ctxlog-stream")})
        deltas = [e["choices"][0]["delta"] for e in sse_events(raw) if e.get("choices")]
    content, tools = None, {}
    for d in deltas:
        if d.get("content") is not None:
            content = (content or "") + d["content"]
        for t in d.get("tool_calls") or []:
            slot = tools.setdefault(t["index"], {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
            slot["id"] = t.get("id") or slot["id"]
            f = t.get("function") or {}
            slot["function"]["name"] += f.get("name") or ""
            slot["function"]["arguments"] += f.get("arguments") or ""
    out = {"role": "assistant", "content": content}
    if tools:
        out["tool_calls"] = [tools[k] for k in sorted(tools)]
    return out


def openai_agent(client, calls, log):
    messages = [
        {"role": "system", "content": SYSTEM},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Here is the failing screenshot. " + prompt(0)},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64," + IMAGE_B64}},
            ],
        },
    ]
    modes = ["raw", "events", "streamed_raw"]
    turn = 0
    for i in range(CALLS):
        if i > 0:
            calls_made = messages[-1].get("tool_calls") or []
            for t in calls_made:  # the agent runs the tools and sends their results
                messages.append({"role": "tool", "tool_call_id": t["id"], "content": tool_output(t["function"]["name"], i)})
            if not calls_made:
                turn += 1
                messages.append({"role": "user", "content": prompt(turn)})
        m = openai_call(client, modes[i % 3], messages, calls)
        messages.append(m)
        log(f"openai    call {i:2} ({modes[i % 3]:12}): {[t['function']['name'] for t in m.get('tool_calls', [])] or m['content']}")


# ---- Processes --------------------------------------------------------------------------------


def start(cmd, log_path, pattern, pids_file):
    log = open(log_path, "wb")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log)
    with open(pids_file, "a") as f:
        f.write(f"{p.pid}\n")
    line = p.stdout.readline().decode()
    m = re.search(pattern, line)
    if not m:
        p.kill()
        fail(f"{cmd[0]} did not start: first line {line!r}; its log:\n{open(log_path).read()}")

    # Keep draining stdout into the log so that the child never blocks on a full pipe.
    def drain():
        for chunk in iter(lambda: p.stdout.read1(4096), b""):
            log.write(chunk)
            log.flush()

    threading.Thread(target=drain, daemon=True).start()
    log.write(line.encode())
    log.flush()
    return p, m.group(1)


def http_get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read()


def ctxlog(bin_, *args, binary=False):
    r = subprocess.run([bin_, *args], capture_output=True)
    if r.returncode != 0:
        fail(f"ctxlog {' '.join(args)} exited {r.returncode}: {r.stderr.decode()}")
    return r.stdout if binary else r.stdout.decode()


def sha(b):
    return hashlib.sha256(b).hexdigest()


# ---- Main -------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctxlog", required=True)
    ap.add_argument("--fake", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--budget", type=int, default=6000)
    ap.add_argument("--show-replay", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    work = a.work
    store_dir = os.path.join(work, "store")
    os.makedirs(store_dir, exist_ok=True)
    store = f"sqlite:{store_dir}/proxy.db"
    pids = os.path.join(work, "pids")
    proxy_log = os.path.join(work, "proxy.log")
    fake_log = os.path.join(work, "fake.log")
    say = print if a.verbose else (lambda *_: None)
    procs = []
    try:
        fake, fake_url = start([a.fake, "--listen", "127.0.0.1:0"], fake_log, r"listening on (http://\S+)", pids)
        procs.append(fake)
        proxy, proxy_url = start(
            [a.ctxlog, "-vv", "proxy", "--upstream", fake_url, "--store", store, "--listen", "127.0.0.1:0", "--budget", str(a.budget)],
            proxy_log,
            r"ctxlog proxy on (http://\S+)",
            pids,
        )
        procs.append(proxy)
        print(f"fake upstream {fake_url}, proxy {proxy_url}, store {store}, budget {a.budget}")

        a_key = "sk-ant-ctxlog-test-" + secrets.token_hex(16)
        o_key = "sk-ctxlog-test-" + secrets.token_hex(16)
        session_name = "sdk-test-" + secrets.token_hex(4)
        a_tee, o_tee = TeeTransport(), TeeTransport()
        a_client = anthropic.Anthropic(
            api_key=a_key,
            base_url=proxy_url,
            max_retries=0,  # one HTTP request per call: the pairing with the upstream's log is exact
            default_headers={"x-ctxlog-session": session_name},
            http_client=anthropic.DefaultHttpxClient(transport=a_tee),
        )
        o_client = openai.OpenAI(
            api_key=o_key, base_url=proxy_url + "/v1", max_retries=0, http_client=openai.DefaultHttpxClient(transport=o_tee)
        )
        a_calls, o_calls = [], []
        t0 = time.time()
        anthropic_agent(a_client, a_calls, say)
        openai_agent(o_client, o_calls, say)
        print(f"{len(a_calls)} anthropic + {len(o_calls)} openai calls through the proxy in {time.time() - t0:.1f} s")

        upstream = [json.loads(l) for l in http_get(fake_url + "/_fake/requests").decode().splitlines() if l]
        metrics = http_get(proxy_url + "/metrics").decode()
        check(a, store, a_tee, a_calls, o_tee, o_calls, upstream, metrics)
        # (e) while the proxy runs: the store's -wal and -shm are there too.
        no_key_in(store_dir, None, [a_key, o_key])
        for key, header in ((a_key, "anthropic"), (o_key, "openai")):
            # The key did reach the upstream (passed through): its absence below means something.
            sdk_ups = [x for x in upstream if ("/v1/messages" in x["request"]["path"]) == (header == "anthropic")]
            if not all(any(key in str(v) for _, v in x["request"]["headers"]) for x in sdk_ups):
                fail(f"the {header} API key did not reach the upstream on every call")

        # Stop the proxy (Ctrl-C: it shuts down cleanly), then look at what it left on disk.
        proxy.send_signal(signal.SIGINT)
        try:
            proxy.wait(timeout=20)
        except subprocess.TimeoutExpired:
            fail("the proxy did not stop within 20 s of SIGINT")
        after_stop(a, store, store_dir, proxy_log, [a_key, o_key])
        print("sdk-proxy-test: all checks passed")
        return 0
    except (CheckFailed, Exception) as e:
        print(f"\nsdk-proxy-test FAILED: {e}", file=sys.stderr)
        if not isinstance(e, CheckFailed):
            import traceback

            traceback.print_exc()
        for name, path in (("proxy", proxy_log), ("fake upstream", fake_log)):
            if os.path.exists(path):
                text = open(path, errors="replace").read()
                print(f"\n---- {name} log ({path}, last 60 lines) ----", file=sys.stderr)
                print("\n".join(text.splitlines()[-60:]), file=sys.stderr)
        return 1
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def check(a, store, a_tee, a_calls, o_tee, o_calls, upstream, metrics):
    model = [x for x in upstream if x["request"]["path"].split("?")[0] in ("/v1/messages", "/v1/chat/completions")]
    # The driver ran the Anthropic conversation, then the OpenAI one, one request per call.
    clients = [("anthropic", x, c) for x, c in zip(a_tee.exchanges, a_calls)] + [
        ("openai", x, c) for x, c in zip(o_tee.exchanges, o_calls)
    ]
    if len(a_tee.exchanges) != CALLS or len(o_tee.exchanges) != CALLS:
        fail(f"expected {CALLS} HTTP requests per SDK, got {len(a_tee.exchanges)} and {len(o_tee.exchanges)}")
    if len(model) != len(clients):
        fail(f"the upstream received {len(model)} model requests for {len(clients)} SDK calls")
    per_stream = {}
    sdk_raw_checked = 0
    tmp = os.path.join(a.work, "client-body.json")
    for i, ((sdk, tee, call), up) in enumerate(zip(clients, model)):
        where = f"{sdk} call {i % CALLS} (upstream exchange {up['seq']})"
        if tee.status != 200 or up["response"]["status"] != 200 or not up["response"]["complete"]:
            fail(f"{where}: status {tee.status}, upstream {up['response']['status']}, complete {up['response']['complete']}")
        stream = tee.headers.get("x-ctxlog-stream")
        if not stream:
            fail(f"{where}: no x-ctxlog-stream header in the proxy's answer")
        if "stream_header" in call and call["stream_header"] != stream:
            fail(f"{where}: the SDK's raw response says stream {call['stream_header']}, the wire {stream}")
        n = per_stream.setdefault(stream, 0)
        per_stream[stream] = n + 1
        # (b) the client got the upstream's bytes exactly.
        sent = b"".join(c.encode() if isinstance(c, str) else base64.b64decode(c["base64"]) for c in up["response"]["chunks"])
        if sha(tee.body) != sha(sent):
            fail(f"{where}: the client received {len(tee.body)} bytes (sha256 {sha(tee.body)[:16]}), the upstream sent {len(sent)} ({sha(sent)[:16]})")
        if "sdk_raw" in call:
            if call["sdk_raw"] != sent:
                fail(f"{where}: the SDK's raw-response bytes differ from the upstream's")
            sdk_raw_checked += 1
        # (a) the forwarded request is the one ctxlog rebuilds from its log for (stream, call n).
        body = up["request"]["body"]
        body = body.encode() if isinstance(body, str) else base64.b64decode(body["base64"])
        with open(tmp, "wb") as f:
            f.write(tee.request_body)
        rebuilt = ctxlog(a.ctxlog, "request", "--store", store, "--session", stream, "--call", str(n), "--fields-from", tmp, binary=True)
        if sha(rebuilt) != sha(body):
            open(os.path.join(a.work, "forwarded.json"), "wb").write(body)
            open(os.path.join(a.work, "rebuilt.json"), "wb").write(rebuilt)
            fail(f"{where}: the forwarded request (sha256 {sha(body)[:16]}) is not the one rebuilt from the log for session {stream} call {n} ({sha(rebuilt)[:16]}); both in {a.work}")
        up["_stream"], up["_call"], up["_sdk"] = stream, n, sdk
        if any(k == "x-ctxlog-session" for k, _ in up["request"]["headers"]):
            fail(f"{where}: the proxy forwarded its own x-ctxlog-session header upstream")
    # (f) one session per SDK, and both compacted.
    a_streams = {x.headers["x-ctxlog-stream"] for x in a_tee.exchanges}
    o_streams = {x.headers["x-ctxlog-stream"] for x in o_tee.exchanges}
    if len(a_streams) != 1 or len(o_streams) != 1 or a_streams == o_streams:
        fail(f"expected one session per SDK, got anthropic {a_streams} and openai {o_streams}")
    # (c) the usage ctxlog recorded for each call is the one the upstream reported.
    records = {}
    for stream in per_stream:
        lines = ctxlog(a.ctxlog, "replay", "--store", store, "--session", stream, "--json").splitlines()
        records[stream] = [json.loads(l) for l in lines if l.strip()]
        if len(records[stream]) != per_stream[stream]:
            fail(f"session {stream}: replay shows {len(records[stream])} calls, the SDK made {per_stream[stream]}")
    for up in model:
        rec = records[up["_stream"]][up["_call"]]
        got = rec.get("usage")
        want = reported_usage(up)
        if got != want:
            fail(f"{up['_sdk']} session {up['_stream']} call {up['_call']}: ctxlog recorded usage {got}, the upstream reported {want}")
        total = want["input"] + want["cache_read"] + want["cache_write"]
        if rec.get("reported_tokens") != total:
            fail(f"{up['_sdk']} call {up['_call']}: reported_tokens {rec.get('reported_tokens')} != {total}")
    for sdk, streams in (("anthropic", a_streams), ("openai", o_streams)):
        (s,) = streams
        levels = [r for r in records[s] if r["level"] > 0 or r["flush"] is not None or r["edits"]]
        if len(levels) < 2:
            fail(f"{sdk} session {s}: compaction happened {len(levels)} time(s); the budget should force it several times")
        print(f"{sdk}: session {s}, {len(records[s])} calls, compacted on {len(levels)} of them")
    m = re.search(r"^ctxlog_proxy_compactions_total (\d+)", metrics, re.M)
    if not m or int(m.group(1)) < 4:
        fail(f"/metrics counts {m.group(1) if m else 'no'} compactions")
    for bad in ("diverged", "aborted", "busy_passthrough"):
        m = re.search(rf"^ctxlog_proxy_{bad}_total (\d+)", metrics, re.M)
        if m and int(m.group(1)) != 0:
            fail(f"/metrics: {bad} = {m.group(1)}, expected 0 in a clean run")
    print(
        f"checked {len(model)} calls: forwarded request == rebuilt from the log (sha256), client bytes == upstream bytes "
        f"({sdk_raw_checked} also through the SDKs' raw-response APIs), recorded usage == reported usage"
    )
    a.sessions = {"anthropic": next(iter(a_streams)), "openai": next(iter(o_streams))}


def reported_usage(up):
    """The usage the upstream reported in an exchange, as ctxlog records it."""
    chunks = [c if isinstance(c, str) else base64.b64decode(c["base64"]).decode() for c in up["response"]["chunks"]]
    text = "".join(chunks)
    if up["request"]["path"].startswith("/v1/messages"):
        if text.startswith("event:"):
            u, out = {}, None
            for ev in sse_events(text.encode()):
                if ev["type"] == "message_start":
                    u = ev["message"]["usage"]
                elif ev["type"] == "message_delta":
                    out = ev["usage"]["output_tokens"]
            u = dict(u, output_tokens=out)
        else:
            u = json.loads(text)["usage"]
        return {
            "input": u["input_tokens"],
            "cache_read": u.get("cache_read_input_tokens") or 0,
            "cache_write": u.get("cache_creation_input_tokens") or 0,
            "output": u["output_tokens"],
        }
    if text.startswith("data:"):
        u = [e for e in sse_events(text.encode()) if e.get("usage")][-1]["usage"]
    else:
        u = json.loads(text)["usage"]
    cached = u["prompt_tokens_details"]["cached_tokens"]
    return {"input": u["prompt_tokens"] - cached, "cache_read": cached, "cache_write": 0, "output": u["completion_tokens"]}


def no_key_in(store_dir, proxy_log, keys):
    """(e) No API key in any file of the store directory (raw bytes) nor in the proxy's log."""
    files = []
    for root, _, names in os.walk(store_dir):
        files += [os.path.join(root, n) for n in names]
    for path in files + ([proxy_log] if proxy_log else []):
        data = open(path, "rb").read()
        for key in keys:
            secret = key.split("-test-")[1]  # the random part alone, in any encoding we can think of
            for form in (secret.encode(), secret.encode("utf-16-le"), base64.b64encode(key.encode())):
                if form in data:
                    fail(f"the API key {key[:12]}... is in {path}")
    names = ", ".join(sorted(os.path.basename(f) for f in files))
    print(f"no API key in the store's files ({names}){' nor in the proxy log' if proxy_log else ''}")


def after_stop(a, store, store_dir, proxy_log, keys):
    out = ctxlog(a.ctxlog, "verify", "--store", store)
    print("verify: " + " ".join(out.split())[:200])
    no_key_in(store_dir, proxy_log, keys)
    # The log is real output (-vv: every call), not an empty file that trivially has no key;
    # and every call's meter anchored on the reported usage.
    served = [l for l in open(proxy_log, errors="replace") if " served version=" in l]
    if len(served) != 2 * CALLS or not all("anchored=true" in l for l in served):
        fail(f"the proxy log has {len(served)} 'served' lines (expected {2 * CALLS}, each anchored=true)")
    if a.show_replay:
        s = a.sessions["anthropic"]
        print(f"\n$ ctxlog replay --store {store} --session {s}")
        print(ctxlog(a.ctxlog, "replay", "--store", store, "--session", s), end="")


if __name__ == "__main__":
    sys.exit(main())
