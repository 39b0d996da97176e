#!/usr/bin/env python3
"""Writes the committed seed corpus of each fuzz target from real data in the repo.

    python3 fuzz/make_seeds.py [DEMO_EXPORT.jsonl]

* record_decode: records of every kind from the golden fs log (tests/golden/v1-fs), as stored
  (sealed) and as bodies (what the target seals itself).
* fs_scan: small multi-frame stream files made of golden records, framed per
  docs/log-format.md ("fs store"), clean, torn in the middle of the last frame, with a
  zero-filled tail, with a misplaced frame, under each mode byte of the target, and with a
  byte changed under the open store.
* transcript: short transcripts from tests/golden/transcript.jsonl, OpenAI-style lines, and
  (if DEMO_EXPORT is given, e.g. `ctxlog demo --store fs:D && ctxlog export --store fs:D`)
  the demo's lines with images, tool calls and results.
Seeds are small on purpose: libFuzzer's default max_len grows to the largest seed.
"""
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "seeds")
STREAM = "00000000-0000-0000-0000-00000000601d"


def crc32c(data, crc=0):
    # Bitwise CRC-32C (Castagnoli), reflected polynomial 0x82F63B78; seeds are small.
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def golden_records():
    path = os.path.join(ROOT, "tests", "golden", "v1-fs", "streams", STREAM + ".log")
    data = open(path, "rb").read()
    out, pos = [], 0
    while pos < len(data):
        (length,) = struct.unpack_from("<I", data, pos)
        payload = pos + 8
        (count,) = struct.unpack_from("<I", data, payload + 24)
        at = payload + 28
        for _ in range(count):
            (n,) = struct.unpack_from("<I", data, at)
            out.append(data[at + 4 : at + 4 + n])
            at += 4 + n
        pos = payload + length + 4
    return out


def frame(stream_bytes, first, records):
    payload = stream_bytes + struct.pack("<QI", first, len(records))
    for r in records:
        payload += struct.pack("<I", len(r)) + r
    head = struct.pack("<I", len(payload))
    crc = crc32c(payload, crc32c(head)) ^ 0xAF
    return head + struct.pack("<I", crc32c(head)) + payload + struct.pack("<I", crc)


def write(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def records_seeds(records):
    seen = {}
    for version, r in enumerate(records, 1):
        kind = r[1]
        if seen.get(kind, 0) >= 2 or len(r) > 1400:
            continue
        seen[kind] = seen.get(kind, 0) + 1
        write("record_decode", "golden-v%d-kind%d-sealed" % (version, kind), r)
        write("record_decode", "golden-v%d-kind%d-body" % (version, kind), r[:-4])


def fs_seeds(records):
    sid = bytes.fromhex(STREAM.replace("-", ""))
    small = [r for r in records if len(r) < 200]
    # Versions must be dense, so the files hold the first small records renumbered 1, 2, ...
    batches = [small[0:1], small[1:4], small[4:5], small[5:8]]
    frames, first = [], 1
    for b in batches:
        frames.append(frame(sid, first, b))
        first += len(b)
    clean = b"".join(frames)
    torn = clean[: len(clean) - len(frames[-1]) // 2]
    zeros = clean + bytes(64)
    misplaced = frames[0] + frames[2] + frames[1]
    other = frame(bytes(16), 2, small[1:2])
    wrong_stream = frames[0] + other
    for mode in (0, 1, 3, 5):
        write("fs_scan", "clean-mode%d" % mode, bytes([mode]) + clean)
    write("fs_scan", "torn-mode0", b"\x00" + torn)
    write("fs_scan", "torn-mode5", b"\x05" + torn)
    write("fs_scan", "zero-tail-mode0", b"\x00" + zeros)
    write("fs_scan", "misplaced-mode0", b"\x00" + misplaced)
    write("fs_scan", "wrong-stream-mode1", b"\x01" + wrong_stream)
    write("fs_scan", "one-frame-mode0", b"\x00" + frames[0])
    write("fs_scan", "empty-mode0", b"\x00")
    # Mode bit 3: a byte of the file changes under the open store (position, XOR mask).
    for name, pos, mask in (("record", 200, 0x04), ("length", 1, 0x01), ("trailer", len(clean) - 1, 0x80)):
        write("fs_scan", "flip-%s-mode8" % name, b"\x08" + struct.pack("<HB", pos, mask) + clean)


OPENAI = [
    {"role": "system", "content": "You are terse."},
    {"role": "developer", "content": "Prefer small diffs."},
    {"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                 {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="}}]},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{\"path\": \"a.rs\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "fn main() {}"},
    {"role": "assistant", "content": "done", "usage": {"prompt_tokens": 321}},
]

PNG_1X1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
ANTHROPIC = [
    {"role": "user", "content": "keep /srv/app as the project root", "pinned": True, "timestamp": "2026-03-02T09:00:00Z"},
    {"role": "user", "content": [{"type": "text", "text": "see"},
                                 {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_1X1}}]},
    {"role": "assistant", "content": [{"type": "thinking", "thinking": "look", "signature": "c2ln"},
                                      {"type": "tool_use", "id": "t1", "name": "ls", "input": {"dir": "."}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": False,
                                  "content": [{"type": "text", "text": "a.rs b.rs"},
                                              {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_1X1}}]}]},
    {"role": "assistant", "content": "two files", "usage": {"input_tokens": 120}},
]


def transcript(name, knobs, more, lines):
    """knobs, more: the target's two knob bytes (see fuzz_targets/transcript.rs)."""
    write("transcript", name, bytes([knobs, more]) + b"\n".join(lines) + b"\n")


def transcript_seeds(demo):
    lines = open(os.path.join(ROOT, "tests", "golden", "transcript.jsonl"), "rb").read().splitlines()
    short = [l for l in lines if len(l) < 700]
    transcript("golden-head-anthropic", 0x01, 0x00, short[:6])
    transcript("golden-tail-auto-small-budget", 0x00, 0x00, short[-6:])
    transcript("golden-mixed-cache-aware", 0x0C, 0x00, short[2:10])
    # No protected tool results, truncation to 40 characters, no recent window: every level.
    transcript("golden-tools-every-level", 0x01, 0x25, [l for l in lines if b"tool_" in l and len(l) < 900][:8])
    openai = [json.dumps(m).encode() for m in OPENAI]
    transcript("openai-auto", 0x00, 0x00, openai)
    transcript("openai-forced-budget-no-summarizer", 0x2A, 0x11, openai)
    transcript("anthropic-media-pinned", 0x01, 0x00, [json.dumps(m).encode() for m in ANTHROPIC])
    if demo:
        dl = [l for l in open(demo, "rb").read().splitlines() if len(l) < 1500]
        for i, chunk in enumerate((dl[:5], dl[5:12], [l for l in dl if b'"image"' in l][:1] + dl[12:16])):
            if chunk:
                transcript("demo-%d" % i, i * 9, 0x05 * i, chunk)


def main():
    records = golden_records()
    records_seeds(records)
    fs_seeds(records)
    transcript_seeds(sys.argv[1] if len(sys.argv) > 1 else None)


if __name__ == "__main__":
    main()
