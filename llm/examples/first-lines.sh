#!/bin/sh
# A tiny offline summarizer for `--summarizer command:…`: reads the summary request JSON on
# stdin and prints the first N (default 8) text strings it carries, one per line, cut to 160
# characters. No network, no jq: it is a stand-in that exercises the whole summary path, not a
# real summary. Usage: command:sh llm/examples/first-lines.sh [N]
n="${1:-8}"
# Every "text":"…" or "content":"…" string value (escaped quotes are not unescaped: a demo).
tr -d '\n' \
  | grep -o '"\(text\|content\)"[[:space:]]*:[[:space:]]*"\([^"\\]\|\\.\)*"' \
  | sed 's/^"[a-z]*"[[:space:]]*:[[:space:]]*"//; s/"$//; s/\\n/ /g' \
  | grep -v '^[[:space:]]*$' \
  | head -n "$n" \
  | cut -c1-160 \
  | sed 's/^/- /'
