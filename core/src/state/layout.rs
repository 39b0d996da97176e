//! The snapshot layout of a [`State`] (`snapshot::SNAPSHOT_LAYOUT` 8): its fields in the order
//! the fold had them before it was composed of sub-folds, so a snapshot's bytes do not depend on
//! which sub-fold owns a field. A new field, or one moved in this list, is a new layout (bump
//! `SNAPSHOT_LAYOUT`); the pinned digests in the tests below say when the bytes changed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::compaction::Compaction;
use super::latches::Latches;
use super::lifecycle::{ImportState, Lifecycle, SessionInfo};
use super::messages::Messages;
use super::meter::{Anchor, LastServed, Meter};
use super::summaries::Summaries;
use super::tools::ToolIndex;
use super::view_index::{ViewIndex, ViewItem};
use super::{Entry, Loaded, State};
use crate::event::GuardKind;
use crate::message::Message;
use crate::store::Version;
use crate::time::Millis;

#[derive(Serialize)]
#[serde(rename = "State")]
struct LayoutRef<'a> {
    info: &'a Option<SessionInfo>,
    version: &'a Version,
    entries: &'a Vec<Entry>,
    bodies: &'a BTreeMap<u64, Arc<Message>>,
    tools: &'a ToolIndex,
    media: &'a BTreeMap<u64, Box<str>>,
    summaries: &'a Summaries,
    compacted: &'a u64,
    flushed: &'a u64,
    calls: &'a u64,
    last_request_at: &'a Option<Millis>,
    anchor: &'a Option<Anchor>,
    rate: &'a Option<(u64, u64)>,
    restored_at: &'a BTreeMap<u64, u64>,
    breaker: &'a u32,
    raised: &'a BTreeSet<GuardKind>,
    first_human: &'a Option<u64>,
    last_human: &'a Option<u64>,
    generation: &'a u64,
    served_generation: &'a Option<u64>,
    checked_generation: &'a u64,
    view: &'a Vec<ViewItem>,
    view_tokens: &'a u64,
    view_summary_tokens: &'a u64,
    verbatim_tool_messages: &'a u64,
    import: &'a Option<ImportState>,
    last_served: &'a Option<LastServed>,
    summary_failures: &'a u32,
    fork_refusals: &'a BTreeMap<String, u64>,
    summary_rejected: &'a Option<(u64, u64, Vec<u32>)>,
}

#[derive(Deserialize)]
#[serde(rename = "State")]
struct Layout {
    info: Option<SessionInfo>,
    version: Version,
    entries: Vec<Entry>,
    bodies: BTreeMap<u64, Arc<Message>>,
    tools: ToolIndex,
    media: BTreeMap<u64, Box<str>>,
    summaries: Summaries,
    compacted: u64,
    flushed: u64,
    calls: u64,
    last_request_at: Option<Millis>,
    anchor: Option<Anchor>,
    rate: Option<(u64, u64)>,
    restored_at: BTreeMap<u64, u64>,
    breaker: u32,
    raised: BTreeSet<GuardKind>,
    first_human: Option<u64>,
    last_human: Option<u64>,
    generation: u64,
    served_generation: Option<u64>,
    checked_generation: u64,
    view: Vec<ViewItem>,
    view_tokens: u64,
    view_summary_tokens: u64,
    verbatim_tool_messages: u64,
    import: Option<ImportState>,
    last_served: Option<LastServed>,
    summary_failures: u32,
    fork_refusals: BTreeMap<String, u64>,
    summary_rejected: Option<(u64, u64, Vec<u32>)>,
}

impl Serialize for State {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        LayoutRef {
            info: &self.lifecycle.info,
            version: &self.lifecycle.version,
            entries: &self.messages.entries,
            bodies: &self.view.bodies,
            tools: &self.messages.tools,
            media: &self.messages.media,
            summaries: &self.compaction.ledger,
            compacted: &self.compaction.compacted,
            flushed: &self.compaction.flushed,
            calls: &self.meter.calls,
            last_request_at: &self.meter.last_request_at,
            anchor: &self.meter.anchor,
            rate: &self.meter.rate,
            restored_at: &self.messages.restored_at,
            breaker: &self.meter.breaker,
            raised: &self.latches.raised,
            first_human: &self.messages.first_human,
            last_human: &self.messages.last_human,
            generation: &self.view.generation,
            served_generation: &self.view.served_generation,
            checked_generation: &self.view.checked_generation,
            view: &self.view.items,
            view_tokens: &self.view.tokens,
            view_summary_tokens: &self.view.summary_tokens,
            verbatim_tool_messages: &self.messages.verbatim_tool_messages,
            import: &self.lifecycle.import,
            last_served: &self.meter.last_served,
            summary_failures: &self.latches.summary_failures,
            fork_refusals: &self.latches.fork_refusals,
            summary_rejected: &self.latches.summary_rejected,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for State {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<State, D::Error> {
        let l = Layout::deserialize(deserializer)?;
        Ok(State {
            lifecycle: Lifecycle { info: l.info, version: l.version, import: l.import },
            messages: Messages {
                entries: l.entries,
                tools: l.tools,
                media: l.media,
                restored_at: l.restored_at,
                first_human: l.first_human,
                last_human: l.last_human,
                verbatim_tool_messages: l.verbatim_tool_messages,
            },
            compaction: Compaction { ledger: l.summaries, compacted: l.compacted, flushed: l.flushed },
            view: ViewIndex {
                bodies: l.bodies,
                generation: l.generation,
                served_generation: l.served_generation,
                checked_generation: l.checked_generation,
                items: l.view,
                tokens: l.view_tokens,
                summary_tokens: l.view_summary_tokens,
            },
            meter: Meter {
                calls: l.calls,
                last_request_at: l.last_request_at,
                anchor: l.anchor,
                rate: l.rate,
                breaker: l.breaker,
                last_served: l.last_served,
            },
            latches: Latches {
                raised: l.raised,
                summary_failures: l.summary_failures,
                fork_refusals: l.fork_refusals,
                summary_rejected: l.summary_rejected,
            },
            loaded: Loaded::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]
    use sha2::{Digest, Sha256};

    use crate::config::Config;
    use crate::message::Message;
    use crate::{parse_message, MemoryStore, Produced, Session, StreamId, Timestamp, Usage, WireFormat};

    fn msg(json: &str) -> Message {
        parse_message(json).unwrap()
    }

    /// A session that flushes, edits, restores, fails a summary and raises guards.
    fn busy_session(view_version: u32) -> Session<MemoryStore> {
        let config = Config { budget: 6_000, view_version, cache_aware: false, ..Config::default() };
        let mut now = Timestamp::from_secs(1_767_225_600);
        let mut s =
            Session::create(MemoryStore::new(), StreamId(uuid::Uuid::from_u128(7)), WireFormat::Anthropic, config, now)
                .unwrap();
        s.append(vec![msg(r#"{"role":"system","content":"You are careful."}"#)]).unwrap();
        s.append(vec![msg(r#"{"role":"user","content":"Fix the bug in ~/src/ora, the CSV exporter."}"#)]).unwrap();
        for turn in 0..40u64 {
            let out = "x ".repeat(300 + (turn as usize * 37) % 900);
            s.append(vec![
                msg(&format!(r#"{{"role":"assistant","content":[{{"type":"text","text":"step {turn}"}},{{"type":"tool_use","id":"t{turn}","name":"read_file","input":{{"path":"f{turn}"}}}}]}}"#)),
                msg(&format!(r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t{turn}","content":"{out}"}}]}}"#)),
            ])
            .unwrap();
            if turn % 7 == 3 {
                s.append(vec![msg(&format!(r#"{{"role":"user","content":"Now please look at part {turn} of the exporter and tell me what you think about how it handles quoting and escaping of fields"}}"#))]).unwrap();
            }
            let plan = s.plan(now).unwrap();
            now = now + std::time::Duration::from_secs(if turn % 5 == 0 { 400 } else { 3 });
            let usage =
                Usage::from_anthropic(&serde_json::json!({"input_tokens": 4000 + turn * 10, "output_tokens": 9}))
                    .unwrap();
            s.commit(plan, now, Some(usage)).unwrap();
            if turn % 13 == 12 {
                while let Some(job) = s.summary_job() {
                    let text = s.summarize(&job).unwrap();
                    if let crate::Prepared::Discarded(_) = s.prepare(&job, text, Produced::extractive()).unwrap() {
                        break;
                    }
                }
            }
            if turn == 20 {
                let edited =
                    (0..s.state().message_count()).find(|&q| s.state().entry(q).is_some_and(|e| e.edit.is_some()));
                if let Some(q) = edited {
                    s.restore(q, "test", "pin").unwrap();
                }
            }
        }
        s.raise_guard(crate::event::GuardKind::TargetUnreachable, "pin".into(), "target_ratio").unwrap();
        s
    }

    fn digest(s: &Session<MemoryStore>) -> String {
        let bytes = bincode::serde::encode_to_vec(s.state(), bincode::config::standard()).unwrap();
        crate::store::hex(&Sha256::digest(&bytes))
    }

    /// The bytes of a snapshot of a session that appended, called, summarized, flushed, edited,
    /// restored and raised a guard, in both view versions, and of its log: what the fold wrote
    /// before it was composed of sub-folds (issue 24). A changed digest is a changed snapshot
    /// layout (bump `SNAPSHOT_LAYOUT`) or a changed decision (the log's digest).
    #[test]
    fn a_busy_sessions_snapshot_and_log_keep_their_bytes_and_the_snapshot_decodes_to_the_state() {
        let pinned = [
            (
                1,
                "194ba1db9c4213046aa5fad2f65b0ffa4f55a34e4042b3c9b3da01b554fbcf12",
                "5b0d505d80fac3d2f75d33e75849e0c368501f99864c377d63c1eae240908426",
            ),
            (
                2,
                "0fe4ac514a9c8c6d5179bfc17a96741b4c457409f3a55c8e1267429eb5c2f637",
                "5150f266d921e3aec9a26ffe25fb06f26c79ce63b9fadbbfb0d97a125b791cff",
            ),
        ];
        for (view_version, state, log) in pinned {
            let s = busy_session(view_version);
            let st = s.state();
            assert!(st.flushed() > 0 && st.entries().iter().any(|e| e.edit.is_some()) && !st.raised().is_empty());
            let recs = crate::Store::read(s.store(), s.id(), 1, usize::MAX).unwrap();
            let mut h = Sha256::new();
            for r in &recs {
                h.update(r.record.as_bytes());
            }
            assert_eq!(crate::store::hex(&h.finalize()), log, "view version {view_version}: the log changed");
            assert_eq!(digest(&s), state, "view version {view_version}: the snapshot layout changed");
            let bytes = bincode::serde::encode_to_vec(st, bincode::config::standard()).unwrap();
            let (back, _): (super::State, usize) =
                bincode::serde::decode_from_slice(&bytes, bincode::config::standard()).unwrap();
            assert_eq!(&back, st, "a snapshot decodes to the state it was taken of");
            assert_eq!(back.heap_report(), st.heap_report());
        }
    }
}
