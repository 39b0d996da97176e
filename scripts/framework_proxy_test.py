"""The frameworks people build agents with, through `ctxlog proxy` to the fake upstream: LiteLLM,
LangChain (with its `SummarizationMiddleware`) and the OpenAI Agents SDK's `SQLiteSession`
(with `pop_item`, an undo). Issue 20's "tests that must exist" with the real libraries, not
simulations of them.

Run by scripts/framework-proxy-test (a venv with the pinned frameworks). Each scenario gets a
fresh proxy on a fresh store and makes >= 20 calls that compact (budget 6,000); then, failing
loudly:

  a. the conversation is one session, or one lineage (sessions joined by branch/continuation
     edges in `ctxlog sessions --json`): never split into unrelated sessions;
  b. no `history_diverged` guard in any of its sessions (nothing spurious);
  c. every call has usage in the log (`replay --json`), and the log's totals (input, cache
     read, cache write, output) equal what the fake upstream billed;
  d. per scenario: Anthropic clients that set no breakpoint get the proxy's (`cache_control` in
     the forwarded bodies, never more than 4); LiteLLM's injected breakpoint moving each turn
     keeps one session; OpenAI streams without `include_usage` still have usage; a client-side
     summary and an undo stay in the lineage;
  e. `ctxlog verify` passes.
"""

import argparse
import asyncio
import json
import os
import secrets
import subprocess
import sys
import time

from sdk_proxy_test import CheckFailed, ctxlog, fail, http_get, reported_usage, start

ANTHROPIC_MODEL = "claude-sonnet-4-5"
OPENAI_MODEL = "gpt-4o"
TURNS = 14  # two calls each (the tool call, then the answer): 28 calls


def tool_output(n):
    return f"// src/module_{n}.rs\n" + "".join(f"pub fn f{i}() -> u32 {{ {i} }}\n" for i in range(90))


def prompt(turn):
    return f"Turn {turn}: read module {turn} and tell me what it does. [[tool:read_file]]"


# ---- the scenarios -------------------------------------------------------------------------------


def litellm_tool_loop(model, base, key, log, stream=False, inject=False):
    """LiteLLM's completion() in a tool loop: OpenAI-shaped messages whatever the provider."""
    import litellm

    tools = [{"type": "function", "function": {"name": "read_file", "description": "Read a module", "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}]
    messages = [{"role": "system", "content": "You are a coding agent. Use the tools."}]
    extra = {"cache_control_injection_points": [{"location": "message", "index": -1}]} if inject else {}
    calls = 0
    for turn in range(TURNS):
        messages.append({"role": "user", "content": prompt(turn)})
        while True:
            r = litellm.completion(model=model, api_base=base, api_key=key, messages=messages, tools=tools, max_tokens=256, stream=stream, num_retries=0, **extra)
            if stream:
                r = litellm.stream_chunk_builder(list(r), messages=messages)
            calls += 1
            msg = r.choices[0].message
            entry = {"role": "assistant", "content": msg.content or ""}
            if msg.tool_calls:
                entry["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}} for c in msg.tool_calls]
            messages.append(entry)
            if not msg.tool_calls:
                break
            for c in msg.tool_calls:
                messages.append({"role": "tool", "tool_call_id": c.id, "content": tool_output(turn)})
        log(f"litellm turn {turn}: {calls} calls")
    return calls


def langchain_chat_loop(chat, log):
    """A LangChain chat model with a bound tool, driven by hand (the loop every agent runs)."""
    from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
    from langchain_core.tools import tool

    @tool
    def read_file(n: int) -> str:
        """Read a module of the repository."""
        return tool_output(n)

    bound = chat.bind_tools([read_file])
    messages = [SystemMessage("You are a coding agent. Use the tools.")]
    calls = 0
    for turn in range(TURNS):
        messages.append(HumanMessage(prompt(turn)))
        while True:
            ai = bound.invoke(messages)
            calls += 1
            messages.append(ai)
            if not ai.tool_calls:
                break
            for c in ai.tool_calls:
                messages.append(ToolMessage(tool_output(turn), tool_call_id=c["id"]))
        log(f"langchain turn {turn}: {calls} calls")
    return calls


def langchain_summarizing_agent(proxy_url, fake_url, key, log):
    """LangChain's `create_agent` with `SummarizationMiddleware`: the client replaces its old
    messages by its own summary now and then."""
    from langchain.agents import create_agent
    from langchain.agents.middleware import SummarizationMiddleware
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def read_file(n: int) -> str:
        """Read a module of the repository."""
        return tool_output(n)

    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    model = ChatOpenAI(model=OPENAI_MODEL, base_url=proxy_url + "/v1", api_key=key, max_retries=0)
    # The client's summarizer is its own business (a model of its choice, not through this
    # proxy); each of its summaries says something new, as a model's would.
    summaries = (AIMessage(f"Summary {i}: the agent read modules up to {2 * i + 4} and described them.") for i in range(1000))
    summarizer = GenericFakeChatModel(messages=summaries)
    agent = create_agent(
        model=model,
        tools=[read_file],
        system_prompt="You are a coding agent. Use the tools.",
        middleware=[SummarizationMiddleware(model=summarizer, trigger=("tokens", 3000), keep=("messages", 6))],
    )
    state = {"messages": []}
    for turn in range(TURNS):
        state = agent.invoke({"messages": state["messages"] + [{"role": "user", "content": prompt(turn)}]})
        log(f"summarizing agent turn {turn}: {len(state['messages'])} messages held by the client")


def agents_sqlite_session(proxy_url, key, db, log):
    """The Agents SDK with a `SQLiteSession` over Chat Completions: turns, an undo
    (`pop_item` twice: the answer and the question) and the question asked again."""
    import agents
    import openai

    agents.set_tracing_disabled(True)

    @agents.function_tool
    def read_file(n: int) -> str:
        """Read a module of the repository."""
        return tool_output(n)

    async def conversation():
        client = openai.AsyncOpenAI(api_key=key, base_url=proxy_url + "/v1", max_retries=0)
        model = agents.OpenAIChatCompletionsModel(model=OPENAI_MODEL, openai_client=client)
        agent = agents.Agent(name="coder", instructions="You are a coding agent. Use the tools.", tools=[read_file], model=model)
        session = agents.SQLiteSession("conversation-1", db)
        for turn in range(TURNS):
            await agents.Runner.run(agent, prompt(turn), session=session)
            if turn % 4 == 3:
                # Undo the last answer and question, then ask it again (a retry).
                for _ in range(4):
                    await session.pop_item()
                await agents.Runner.run(agent, prompt(turn) + " (again)", session=session)
            log(f"agents turn {turn}")
        await client.close()

    asyncio.run(conversation())


# ---- the checks ----------------------------------------------------------------------------------


def components(sessions):
    """Sessions joined by lineage edges (either direction), as sets of ids."""
    parent = {s["session"]: s["session"] for s in sessions}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for s in sessions:
        for edge in s.get("lineage") or []:
            if edge["session"] in parent:
                parent[find(s["session"])] = find(edge["session"])
    out = {}
    for s in sessions:
        out.setdefault(find(s["session"]), set()).add(s["session"])
    return list(out.values())


def check(a, name, store, fake_url, key, made=None, breakpoints=False, client_summaries=False):
    sessions = [s for s in json.loads(ctxlog(a.ctxlog, "sessions", "--store", store, "--json")) if s["calls"] > 0]
    groups = components(sessions)
    if len(groups) != 1:
        fail(f"{name}: one conversation became {len(groups)} unrelated session groups: {[sorted(g) for g in groups]}")
    records, guards, seen = [], [], set()
    for s in sessions:
        lines = ctxlog(a.ctxlog, "replay", "--store", store, "--session", s["session"], "--json").splitlines()
        for r in (json.loads(l) for l in lines if l.strip()):
            # A branch's log starts with a copy of its parent's calls: count each call once.
            ident = (r["call"], r["at"], r["version"], json.dumps(r["usage"], sort_keys=True))
            if ident not in seen:
                seen.add(ident)
                records.append(r)
            guards += r.get("guards") or []
        inspect = json.loads(ctxlog(a.ctxlog, "inspect", "--store", store, "--session", s["session"], "--json"))
        guards += [g.get("kind") for g in inspect.get("guards_between_calls") or []]
    diverged = [g for g in guards if "diverged" in str(g)]
    if diverged:
        fail(f"{name}: {len(diverged)} history_diverged guard(s) in the lineage: {diverged[:3]}")
    ups = [x for x in (json.loads(l) for l in http_get(fake_url + "/_fake/requests").decode().splitlines() if l) if any(str(v) in (key, "Bearer " + key) for _, v in x["request"]["headers"])]
    ups = [x for x in ups if x["request"]["path"].split("?")[0] in ("/v1/messages", "/v1/chat/completions")]
    if made is not None and len(ups) != made:
        fail(f"{name}: the upstream got {len(ups)} model requests for {made} calls")
    if len(records) != len(ups):
        fail(f"{name}: the log has {len(records)} calls, the upstream answered {len(ups)}")
    if len(records) < 20:
        fail(f"{name}: only {len(records)} calls; the scenario needs >= 20")
    missing = [r["call"] for r in records if not r.get("usage")]
    if missing:
        fail(f"{name}: {len(missing)} calls without usage in the log (calls {missing[:5]})")
    keys = ("input", "cache_read", "cache_write", "output")
    logged = {k: sum(r["usage"][k] for r in records) for k in keys}
    billed = {k: sum(reported_usage(x)[k] for x in ups) for k in keys}
    if logged != billed:
        fail(f"{name}: the log's usage {logged} is not what the upstream billed {billed}")
    compacted = [r for r in records if r["level"] > 0 or r["flush"] is not None or r["edits"]]
    edges = [e for s in sessions for e in s.get("lineage") or [] if e["relation"] == "predecessor"]
    if client_summaries:
        # The client keeps its history short itself: each of its summaries is an edge.
        summarized = [e for e in edges if e["kind"] == "client_compacted"]
        if len(summarized) < 2:
            fail(f"{name}: {len(summarized)} client summaries recorded in the lineage ({edges}); the client made more")
    elif len(compacted) < 2:
        fail(f"{name}: compaction happened on {len(compacted)} call(s); the budget should force it")
    if breakpoints:
        counts = [json.dumps(json.loads(body_text(x))).count('"cache_control"') for x in ups]
        if min(counts) < 1 or max(counts) > 4:
            fail(f"{name}: forwarded bodies carry {min(counts)}..{max(counts)} cache_control blocks (want 1..4)")
    out = ctxlog(a.ctxlog, "verify", "--store", store)
    print(f"{name}: {len(records)} calls in {len(sessions)} session(s) of one lineage ({', '.join(sorted(e['kind'] for e in edges)) or 'no edges'}), compacted on {len(compacted)}, usage == billed ({logged['cache_read']} cache-read tokens), 0 divergences; verify: {' '.join(out.split())[:60]}")


def body_text(x):
    import base64

    b = x["request"]["body"]
    return b if isinstance(b, str) else base64.b64decode(b["base64"]).decode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctxlog", required=True)
    ap.add_argument("--fake", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--budget", type=int, default=6000)
    ap.add_argument("--only", default="")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    say = print if a.verbose else (lambda *_: None)
    pids = os.path.join(a.work, "pids")
    procs = []
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network for the price list

    scenarios = {
        "litellm-anthropic-injection": (lambda p, f, k, d: litellm_tool_loop("anthropic/" + ANTHROPIC_MODEL, p, k, say, inject=True), dict(breakpoints=True)),
        "litellm-openai-stream": (lambda p, f, k, d: litellm_tool_loop("openai/" + OPENAI_MODEL, p + "/v1", k, say, stream=True), {}),
        "langchain-anthropic-no-breakpoints": (lambda p, f, k, d: langchain_chat_loop(anthropic_chat(p, k), say), dict(breakpoints=True)),
        "langchain-openai-stream": (lambda p, f, k, d: langchain_chat_loop(openai_chat(p, k), say), {}),
        "langchain-summarization-middleware": (lambda p, f, k, d: langchain_summarizing_agent(p, f, k, say), dict(client_summaries=True)),
        "agents-sqlite-session-undo": (lambda p, f, k, d: agents_sqlite_session(p, k, os.path.join(d, "agents.db"), say), {}),
    }
    only = [s for s in a.only.split(",") if s]
    failed = []
    for name, (run, opts) in scenarios.items():
        if only and name not in only:
            continue
        d = os.path.join(a.work, name)
        os.makedirs(d, exist_ok=True)
        store = f"sqlite:{d}/proxy.db"
        logs = (os.path.join(d, "proxy.log"), os.path.join(d, "fake.log"))
        try:
            fake, fake_url = start([a.fake, "--listen", "127.0.0.1:0"], logs[1], r"listening on (http://\S+)", pids)
            procs.append(fake)
            proxy, proxy_url = start([a.ctxlog, "-v", "proxy", "--upstream", fake_url, "--store", store, "--listen", "127.0.0.1:0", "--budget", str(a.budget)], logs[0], r"ctxlog proxy on (http://\S+)", pids)
            procs.append(proxy)
            key = "sk-ctxlog-test-" + secrets.token_hex(16)
            t0 = time.time()
            made = run(proxy_url, fake_url, key, d)
            say(f"{name}: {time.time() - t0:.1f} s")
            check(a, name, store, fake_url, key, made=made if isinstance(made, int) else None, **opts)
        except (CheckFailed, Exception) as e:  # noqa: BLE001
            failed.append(name)
            print(f"\n{name} FAILED: {e}", file=sys.stderr)
            if not isinstance(e, CheckFailed):
                import traceback

                traceback.print_exc()
            for what, path in zip(("proxy", "fake upstream"), logs):
                if os.path.exists(path):
                    print(f"---- {what} log ({path}, last 20 lines) ----", file=sys.stderr)
                    print("\n".join(open(path, errors="replace").read().splitlines()[-20:]), file=sys.stderr)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            procs.clear()
    if failed:
        print(f"framework-proxy-test: {len(failed)} scenario(s) FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    print("framework-proxy-test: all checks passed")
    return 0


def anthropic_chat(proxy_url, key):
    from langchain_anthropic import ChatAnthropic

    return ChatAnthropic(model=ANTHROPIC_MODEL, base_url=proxy_url, api_key=key, max_tokens=256, max_retries=0)


def openai_chat(proxy_url, key):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=OPENAI_MODEL, base_url=proxy_url + "/v1", api_key=key, max_retries=0, streaming=True)


if __name__ == "__main__":
    sys.exit(main())
