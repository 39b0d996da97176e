//! Snapshots: the fold's state sealed at a version, a cache that makes opening a session fast.
//! The layout number ([`SNAPSHOT_LAYOUT`]), encoding, a decode whose failures are typed
//! ([`SnapshotError`]: only a stale layout is expected), the load on open (anything unusable
//! means a full replay), and what `verify` makes of a stored one.

use crate::codec;
use crate::error::SessionError;
use crate::problem::ProblemKind;
use crate::state::State;
pub use crate::store::SnapshotError;
use crate::store::{Snapshot, Store, StreamId};

/// Layout of a snapshot body; bump on any change to [`State`]'s fields *or* to what the fold
/// computes from an event (a snapshot is only valid for the fold that wrote it).
/// 2: the target guards re-arm after a call that needs no compaction.
/// 3: summaries carry their standing (pending, shown, condensed, retired); the view's summary
/// tokens are kept.
/// 4: the count of verbatim messages that carry tool ids includes system and first human ones.
/// 5: bounded memory: entries keep facts, their record's version and a body only while in the
/// view; a tool index replaces the id maps; summaries out of the view drop their text; imports.
/// 6: the config holds `usage_floor_ratio`; the meter anchors only on trusted reports (and
/// scales what was added since by the report's ratio), and a trusted report clears the
/// usage guard.
/// 7: the last served request (its record of model and tools), consecutive summary failures,
/// fork refusal counts; a call that needs no compaction ends a paused summarizer's wait.
/// 8: the config holds `view_version`; views of version 2 hold placeholders; the meter keeps the
/// provider's rate across history changes; restored messages and when; the first human message
/// over the target may be truncated once; the last request's breakpoint placement; the summary
/// job a provider refused (latched until the job changes).
/// 9: the config holds the parity knobs (`exclude_tools`, `clear_tool_inputs`,
/// `tool_placeholder`, `keep_thinking_turns`).
pub const SNAPSHOT_LAYOUT: u32 = 9;

/// Encodes a state as a sealed snapshot.
pub fn encode_snapshot(state: &State) -> Result<Snapshot, SnapshotError> {
    let mut body = SNAPSHOT_LAYOUT.to_le_bytes().to_vec();
    bincode::serde::encode_into_std_write(state, &mut body, bincode::config::standard())
        .map_err(|e| SnapshotError::Payload(e.to_string()))?;
    Ok(Snapshot::seal(state.version(), body))
}

/// Decodes a snapshot; any problem (seal, layout, payload, version mismatch) is reported so
/// the caller can fall back to a full replay.
pub fn decode_snapshot(snap: &Snapshot) -> Result<State, SnapshotError> {
    let body = snap.body()?;
    let (layout, rest) = body.split_at_checked(4).ok_or(SnapshotError::Short)?;
    let found = u32::from_le_bytes([layout[0], layout[1], layout[2], layout[3]]);
    if found != SNAPSHOT_LAYOUT {
        return Err(SnapshotError::Layout { found, reads: SNAPSHOT_LAYOUT });
    }
    let config = bincode::config::standard().with_limit::<{ codec::MAX_PAYLOAD_BYTES }>();
    let (state, _): (State, usize) =
        bincode::serde::decode_from_slice(rest, config).map_err(|e| SnapshotError::Payload(e.to_string()))?;
    if state.version() != snap.version {
        return Err(SnapshotError::Version { claimed: snap.version, held: state.version() });
    }
    Ok(state)
}

/// The stored snapshot if it is usable; `None` (full replay) if missing or unusable.
pub(crate) fn load<S: Store>(store: &S, id: StreamId) -> Result<Option<State>, SessionError> {
    let Some(snap) = store.get_snapshot(id)? else { return Ok(None) };
    let head = store.head(id)?.unwrap_or(0);
    if snap.version > head {
        return Ok(None);
    }
    Ok(decode_snapshot(&snap).ok())
}

/// What `verify` makes of a stored snapshot, given the state the replay reached at its version.
pub(crate) enum Finding {
    /// It decodes to exactly the replayed state.
    Sound,
    /// Another build's layout: a stale cache, not damage (opening ignores it and replays).
    Stale(SnapshotError),
    /// Damage, or a snapshot the log does not explain.
    Problem(ProblemKind),
}

/// Compares `snap` with `replayed` (`None`: the replay never reached its version).
pub(crate) fn check(snap: &Snapshot, replayed: Option<&State>) -> Finding {
    match (decode_snapshot(snap), replayed) {
        (Err(e @ SnapshotError::Layout { .. }), _) => Finding::Stale(e),
        (Err(error), _) => Finding::Problem(ProblemKind::SnapshotUnusable { error }),
        (Ok(_), None) => Finding::Problem(ProblemKind::SnapshotPastReplay),
        (Ok(s), Some(replayed)) if s != *replayed => Finding::Problem(ProblemKind::SnapshotDiffers),
        _ => Finding::Sound,
    }
}
