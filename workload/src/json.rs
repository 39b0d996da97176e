//! The message model and its JSON text, written by hand so that serde_json feature unification
//! elsewhere in a workspace (`preserve_order`) can never reorder keys.

use std::fmt::Write as _;

/// A value of a tool input.
pub(crate) enum Val {
    S(String),
    N(u64),
}

/// One Anthropic content block.
pub(crate) enum Block {
    Text(String),
    /// A base64 PNG.
    Image(String),
    Thinking {
        thinking: String,
        signature: String,
    },
    ToolUse {
        id: String,
        name: &'static str,
        input: Vec<(&'static str, Val)>,
    },
    ToolResult {
        id: String,
        text: String,
        is_error: bool,
        as_blocks: bool,
    },
}

/// A message's content: a plain string or blocks.
pub(crate) enum Content {
    Str(String),
    Blocks(Vec<Block>),
}

/// One JSONL line (without its `\n`): `{"role","content","timestamp"}`.
pub(crate) fn message_line(role: &str, content: &Content, timestamp: &str) -> String {
    let mut out = String::new();
    out.push_str("{\"role\":");
    push_str(&mut out, role);
    out.push_str(",\"content\":");
    match content {
        Content::Str(s) => push_str(&mut out, s),
        Content::Blocks(bs) => {
            out.push('[');
            for (i, b) in bs.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_block(&mut out, b);
            }
            out.push(']');
        }
    }
    out.push_str(",\"timestamp\":");
    push_str(&mut out, timestamp);
    out.push('}');
    out
}

fn push_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn push_block(out: &mut String, b: &Block) {
    match b {
        Block::Text(t) => {
            out.push_str("{\"type\":\"text\",\"text\":");
            push_str(out, t);
            out.push('}');
        }
        Block::Image(data) => {
            out.push_str("{\"type\":\"image\",\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":");
            push_str(out, data);
            out.push_str("}}");
        }
        Block::Thinking { thinking, signature } => {
            out.push_str("{\"type\":\"thinking\",\"thinking\":");
            push_str(out, thinking);
            out.push_str(",\"signature\":");
            push_str(out, signature);
            out.push('}');
        }
        Block::ToolUse { id, name, input } => {
            out.push_str("{\"type\":\"tool_use\",\"id\":");
            push_str(out, id);
            out.push_str(",\"name\":");
            push_str(out, name);
            out.push_str(",\"input\":{");
            for (i, (k, v)) in input.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_str(out, k);
                out.push(':');
                match v {
                    Val::S(s) => push_str(out, s),
                    Val::N(n) => {
                        let _ = write!(out, "{n}");
                    }
                }
            }
            out.push_str("}}");
        }
        Block::ToolResult { id, text, is_error, as_blocks } => {
            out.push_str("{\"type\":\"tool_result\",\"tool_use_id\":");
            push_str(out, id);
            out.push_str(",\"content\":");
            if *as_blocks {
                out.push_str("[{\"type\":\"text\",\"text\":");
                push_str(out, text);
                out.push_str("}]");
            } else {
                push_str(out, text);
            }
            if *is_error {
                out.push_str(",\"is_error\":true");
            }
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_control_character_is_escaped_and_the_line_parses_back() {
        let text: String = (0u8..0x20).map(char::from).chain("\"\\é🙂".chars()).collect();
        let blocks = Content::Blocks(vec![
            Block::Text(text.clone()),
            Block::ToolUse {
                id: "t".into(),
                name: "run",
                input: vec![("cmd", Val::S(text.clone())), ("n", Val::N(7))],
            },
            Block::ToolResult { id: "t".into(), text: text.clone(), is_error: true, as_blocks: true },
        ]);
        let line = message_line("assistant", &blocks, "2026-03-02T09:00:00Z");
        assert!(!line.contains('\n'));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["content"][0]["text"], text.as_str());
        assert_eq!(v["content"][1]["input"]["cmd"], text.as_str());
        assert_eq!(v["content"][1]["input"]["n"], 7);
        assert_eq!(v["content"][2]["content"][0]["text"], text.as_str());
        assert_eq!(v["content"][2]["is_error"], true);
        assert_eq!(v["timestamp"], "2026-03-02T09:00:00Z");
    }
}
