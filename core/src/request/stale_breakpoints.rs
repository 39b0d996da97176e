//! At most four `cache_control` breakpoints reach Anthropic. A client that moves its breakpoints
//! (Anthropic's multi-turn pattern: the latest user message marked each turn) keeps its session
//! since issue 20, so the log holds each message as first sent, breakpoint included: left as
//! they are, the view would carry every breakpoint the client ever set, and the API refuses a
//! fifth. The newest ones are what the client set last, so the request keeps those (after the
//! tools' and the system's) and drops the older ones from the request's bytes; the view, its
//! digest and the log are untouched, and the rule is a pure function of the view and the
//! request's fields, so `replay::served_request` rebuilds the same body.
//!
//! A minimal version, written with issue 20's branches: where breakpoints go in the forwarded
//! body (and mapping a client's breakpoints onto an edited view) is that issue's item 3.

use serde_json::value::RawValue;

use crate::message::{Block, Content, Message};

/// Anthropic's limit on blocks with `cache_control` in one request.
const MAX: usize = 4;

fn marked(extra: &[(String, crate::message::RawJson)]) -> bool {
    extra.iter().any(|(k, _)| k == "cache_control")
}

/// Breakpoints in a content value (blocks, and blocks inside tool results).
pub(crate) fn in_content(c: &Content) -> usize {
    let Content::Blocks(blocks) = c else { return 0 };
    blocks
        .iter()
        .map(|b| match b {
            Block::Text { extra, .. }
            | Block::Media { extra, .. }
            | Block::ImageUrl { extra, .. }
            | Block::ToolUse { extra, .. }
            | Block::Thinking { extra, .. } => usize::from(marked(extra)),
            Block::ToolResult { content, extra, .. } => {
                usize::from(marked(extra)) + content.as_ref().map_or(0, in_content)
            }
            Block::Other(_) => 0,
        })
        .sum()
}

fn in_message(m: &Message) -> usize {
    m.content.as_ref().map_or(0, in_content)
}

/// Breakpoints on the request's `tools` (a JSON array of objects), if any.
fn in_tools(fields: &[(String, Box<RawValue>)]) -> usize {
    let Some((_, raw)) = fields.iter().find(|(k, _)| k == "tools") else { return 0 };
    serde_json::from_str::<Vec<serde_json::Map<String, serde_json::Value>>>(raw.get())
        .map_or(0, |tools| tools.iter().filter(|t| t.contains_key("cache_control")).count())
}

/// The indices of `messages` (the request's, in order) whose breakpoints are dropped, given
/// the system's breakpoints: the oldest beyond what fits under the limit after the tools and the
/// system. Empty (and no tools parsed) when no message has one.
pub(crate) fn stale<'m>(
    messages: impl DoubleEndedIterator<Item = Option<&'m Message>>,
    system: usize,
    fields: &[(String, Box<RawValue>)],
) -> Vec<usize> {
    let counts: Vec<usize> = messages.map(|m| m.map_or(0, in_message)).collect();
    let total: usize = counts.iter().sum();
    if total == 0 {
        return Vec::new();
    }
    let mut room = MAX.saturating_sub(system + in_tools(fields));
    if total <= room {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (i, n) in counts.iter().enumerate().rev() {
        if *n == 0 {
            continue;
        }
        if *n <= room {
            room -= n;
        } else {
            out.push(i);
            room = 0;
        }
    }
    out
}

/// The message without its breakpoints.
pub(crate) fn strip(m: &Message) -> Message {
    fn content(c: &mut Content) {
        let Content::Blocks(blocks) = c else { return };
        for b in blocks {
            match b {
                Block::Text { extra, .. }
                | Block::Media { extra, .. }
                | Block::ImageUrl { extra, .. }
                | Block::ToolUse { extra, .. }
                | Block::Thinking { extra, .. } => extra.retain(|(k, _)| k != "cache_control"),
                Block::ToolResult { content: inner, extra, .. } => {
                    extra.retain(|(k, _)| k != "cache_control");
                    if let Some(inner) = inner {
                        content(inner);
                    }
                }
                Block::Other(_) => {}
            }
        }
    }
    let mut m = m.clone();
    if let Some(c) = &mut m.content {
        content(c);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::parse_message;

    fn marked_user(text: &str) -> Message {
        parse_message(&format!(
            r#"{{"role":"user","content":[{{"type":"text","text":"{text}","cache_control":{{"type":"ephemeral"}}}}]}}"#
        ))
        .unwrap()
    }

    #[test]
    fn the_newest_breakpoints_are_kept() {
        let plain = parse_message(r#"{"role":"assistant","content":"ok"}"#).unwrap();
        let msgs: Vec<Message> = (0..6).flat_map(|i| [marked_user(&format!("q{i}")), plain.clone()]).collect();
        let it = || msgs.iter().map(Some);
        // Six marked user messages, one system breakpoint: the three newest stay.
        assert_eq!(stale(it(), 1, &[]), vec![4, 2, 0]);
        // Within the limit: nothing is dropped.
        assert_eq!(stale(msgs[6..].iter().map(Some), 0, &[]), Vec::<usize>::new());
        assert_eq!(stale(msgs[6..].iter().map(Some), 1, &[]), Vec::<usize>::new());
        // A tools breakpoint takes a place too.
        let tools: Box<RawValue> =
            serde_json::from_str(r#"[{"name":"t","input_schema":{},"cache_control":{"type":"ephemeral"}}]"#).unwrap();
        let tools = [("tools".to_owned(), tools)];
        assert_eq!(stale(it(), 1, &tools), vec![6, 4, 2, 0]);
        // Three messages and the system fit, until the tools' breakpoint is counted.
        assert_eq!(stale(msgs[6..].iter().map(Some), 1, &tools), vec![0]);
        let stripped = strip(&msgs[0]);
        assert_eq!(in_message(&stripped), 0);
        assert_eq!(stripped.plain_text(), msgs[0].plain_text());
    }
}
