"""The official `anthropic` SDK's context editing (issue 23) through `ctxlog proxy
--provider-context-management apply` to the strict fake upstream: `client.beta.messages.create`
and `.stream` with `betas=["context-management-2025-06-27"]` and a `context_management` of
`clear_thinking_20251015` + `clear_tool_uses_20250919`, thinking enabled, a 24-call tool loop.
Checks that the SDK parses the answer's `context_management.applied_edits` (JSON and stream) as
its own types, that no forwarded request carries the field or its beta (the fake would refuse
it), that the old results reached the provider cleared, and `ctxlog verify`.

    python scripts/sdk_context_management_test.py --ctxlog BIN --fake BIN --work DIR
"""

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import urllib.request

import anthropic

BETA = "context-management-2025-06-27"
EDITS = {
    "edits": [
        {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 2}},
        {
            "type": "clear_tool_uses_20250919",
            "trigger": {"type": "input_tokens", "value": 5000},
            "keep": {"type": "tool_uses", "value": 2},
            "exclude_tools": ["memory"],
        },
    ]
}
TOOLS = [
    {"name": n, "description": f"the {n} tool", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}
    for n in ("read_file", "memory")
]


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def start(cmd, log_path, pattern):
    log = open(log_path, "wb")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log)
    line = p.stdout.readline().decode()
    m = re.search(pattern, line)
    if not m:
        p.kill()
        fail(f"{cmd[0]} did not start: {line!r}")

    def drain():
        for chunk in iter(lambda: p.stdout.read1(4096), b""):
            log.write(chunk)

    threading.Thread(target=drain, daemon=True).start()
    return p, m.group(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctxlog", required=True)
    ap.add_argument("--fake", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    store = f"sqlite:{a.work}/cm.db"
    procs = []
    try:
        fake, fake_url = start([a.fake, "--listen", "127.0.0.1:0"], f"{a.work}/cm-fake.log", r"listening on (http://\S+)")
        procs.append(fake)
        proxy, proxy_url = start(
            [a.ctxlog, "proxy", "--upstream", fake_url, "--store", store, "--listen", "127.0.0.1:0",
             "--provider-context-management", "apply", "--summarizer", "none"],
            f"{a.work}/cm-proxy.log",
            r"ctxlog proxy on (http://\S+)",
        )
        procs.append(proxy)
        client = anthropic.Anthropic(base_url=proxy_url, api_key="sk-ant-sdk-context-management-test")
        messages = [{"role": "user", "content": "Read every module. [[tool:read_file]]"}]
        cleared = 0
        for i in range(24):
            kw = dict(
                model="claude-sonnet-4-6",
                max_tokens=2048,
                thinking={"type": "enabled", "budget_tokens": 1024},
                tools=TOOLS,
                messages=messages,
                betas=[BETA],
                context_management=EDITS,
            )
            if i % 2:
                with client.beta.messages.stream(**kw) as s:
                    msg = s.get_final_message()
            else:
                msg = client.beta.messages.create(**kw)
            cm = msg.context_management
            if cm is None:
                fail(f"call {i}: the SDK found no context_management in the answer")
            for e in cm.applied_edits:
                if e.type == "clear_tool_uses_20250919":
                    cleared = max(cleared, e.cleared_tool_uses)
                if e.cleared_input_tokens <= 0:
                    fail(f"call {i}: an applied edit cleared nothing: {e}")
            messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]})
            calls = [b for b in msg.content if b.type == "tool_use"]
            if calls:
                messages.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": c.id, "content": f"output {i} " + "x " * 900} for c in calls]})
            else:
                messages.append({"role": "user", "content": f"Next module {i}. [[tool:read_file]]"})
        if cleared == 0:
            fail("no answer reported a cleared tool use")
        exchanges = [json.loads(line) for line in urllib.request.urlopen(f"{fake_url}/_fake/requests").read().decode().splitlines() if line.strip()]
        if len(exchanges) != 24:
            fail(f"{len(exchanges)} requests reached the fake, not 24")
        for x in exchanges:
            if x["response"]["status"] != 200:
                fail(f"the fake refused a forwarded request: {x['response']}")
            body = json.loads(x["request"]["body"])
            if "context_management" in body:
                fail("a forwarded request carries context_management")
            beta = [v for (k, v) in x["request"]["headers"] if k == "anthropic-beta"]
            if any(BETA in v for v in beta):
                fail("a forwarded request carries the context-management beta")
        last = exchanges[-1]["request"]["body"]
        if "cleared by ctxlog" not in last:
            fail("the last forwarded request has no cleared tool result")
        r = subprocess.run([a.ctxlog, "verify", "--store", store], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"verify: {r.stdout}{r.stderr}")
        print(f"ok: 24 calls (create and stream), up to {cleared} tool uses cleared per call, the SDK parsed every applied_edits")
    finally:
        for p in procs:
            p.kill()


if __name__ == "__main__":
    main()
