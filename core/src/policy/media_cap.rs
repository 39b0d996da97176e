//! The provider's limit on images in one request. Anthropic takes up to 600 images per request,
//! 100 for models with a 200,000-token context window (its vision guide), and refuses more with
//! a 400 ("Too much media"); a computer-use agent's screenshots reach that long before the
//! token budget does. After the ladder, while the view holds more images than that, the oldest
//! messages holding images are removed (tool groups together; never system, pinned, the first
//! or the last human message), so every served view is one the provider accepts.

use crate::event::{EditKind, EditReason, Edited, Event};
use crate::message::{Block, Content, Message};
use crate::policy::guards::always_protected;
use crate::state::{Item, State};
use crate::view::item_message;
use crate::wire::WireFormat;

/// The most images Anthropic takes in one request (the limit of its 200k-context models).
pub(crate) const ANTHROPIC_MAX_IMAGES: usize = 100;
/// The largest tool group moved as one (as the ladder's).
const MAX_GROUP: usize = 64;

/// The image limit of a wire format's provider; `None` when it documents none this applies.
pub(crate) fn max_images(format: WireFormat) -> Option<usize> {
    match format {
        WireFormat::Anthropic => Some(ANTHROPIC_MAX_IMAGES),
        WireFormat::OpenAi | WireFormat::OpenAiResponses | WireFormat::Gemini => None,
    }
}

fn content_images(c: Option<&Content>) -> usize {
    match c {
        Some(Content::Blocks(bs)) => bs.iter().map(block_images).sum(),
        _ => 0,
    }
}

fn block_images(b: &Block) -> usize {
    match b {
        Block::Media { kind, .. } if kind.as_str() == "image" => 1,
        Block::ImageUrl { .. } => 1,
        Block::ToolResult { content, .. } => content_images(content.as_ref()),
        _ => 0,
    }
}

/// Images in a message as it is sent.
pub(crate) fn images(m: &Message) -> usize {
    content_images(m.content.as_ref())
}

/// The images of each message of the view, in order (messages without any left out).
fn view_images(state: &State) -> Vec<(u64, usize)> {
    state
        .view()
        .iter()
        .filter_map(|it| match it.item {
            // Media sits at the top of a message or inside a tool result: only those are read.
            Item::Message(seq) if state.entry(seq).is_some_and(|e| e.has_media() || e.is_tool_result()) => {
                let n = item_message(state, it.item).map_or(0, |m| images(&m));
                (n > 0).then_some((seq, n))
            }
            _ => None,
        })
        .collect()
}

/// Is the view over its provider's image limit?
pub(crate) fn over(state: &State) -> bool {
    let Some(max) = state.info().and_then(|i| max_images(i.format)) else { return false };
    view_images(state).iter().map(|(_, n)| n).sum::<usize>() > max
}

/// A message with its tool partners, transitively; `None` for an unanswered call (never
/// removed) or a group too large to move.
fn group(state: &State, seq: u64) -> Option<Vec<u64>> {
    let mut group = vec![seq];
    let mut i = 0;
    while let Some(&s) = group.get(i) {
        i += 1;
        state.call_results(s)?;
        for p in state.tool_partners(s) {
            if !group.contains(&p) {
                group.push(p);
            }
        }
        if group.len() > MAX_GROUP {
            return None;
        }
    }
    group.sort_unstable();
    Some(group)
}

/// The removals that bring the view of `state` within its provider's image limit, oldest
/// first, each checked against the fold in order (one that would break an invariant is
/// skipped, with its group).
pub(crate) fn cap(state: &State, level: u8) -> Vec<Edited> {
    let Some(max) = state.info().and_then(|i| max_images(i.format)) else { return Vec::new() };
    let counts = view_images(state);
    let mut total: usize = counts.iter().map(|(_, n)| n).sum();
    if total <= max {
        return Vec::new();
    }
    let rule = format!("media cap: the view holds {total} images, over the provider's limit of {max}");
    let mut scratch: Option<State> = None;
    let mut edits = Vec::new();
    for &(seq, _) in &counts {
        if total <= max {
            break;
        }
        let cur = scratch.as_ref().unwrap_or(state);
        if !cur.in_view(seq) || always_protected(cur, seq) {
            continue;
        }
        let Some(members) = group(cur, seq) else { continue };
        if members.iter().any(|&g| always_protected(cur, g)) {
            continue;
        }
        let members: Vec<u64> = members.into_iter().filter(|&g| cur.in_view(g)).collect();
        let mut next = cur.clone();
        let mut batch = Vec::new();
        let mut freed = 0;
        let mut ok = true;
        for g in members {
            let n = item_message(&next, Item::Message(g)).map_or(0, |m| images(&m));
            let reason = EditReason { level, rule: rule.clone(), target_tokens: 0, guard: None };
            let ev = Edited { seq: g, kind: EditKind::Removed, reason };
            if next.apply(next.version() + 1, &Event::Edited(ev.clone())).is_err() {
                ok = false;
                break;
            }
            freed += n;
            batch.push(ev);
        }
        if ok {
            total = total.saturating_sub(freed);
            edits.extend(batch);
            scratch = Some(next);
        }
    }
    edits
}
