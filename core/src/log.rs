//! Reading a stream: its events in order ([`for_each_event`], [`READ_CHUNK`] records per round
//! trip), the message bodies a fold needs but does not hold ([`load_messages`], [`hydrate`]),
//! and the blob area as a renderer's source. Shared by the session, replay, verify and copy.

use std::ops::Range;
use std::sync::Arc;

use crate::codec;
use crate::error::SessionError;
use crate::event::Event;
use crate::message::Message;
use crate::state::State;
use crate::store::{BlobId, Store, StreamId, Version};
use crate::wire::BlobSource;

/// Records read per store round trip during replay.
pub const READ_CHUNK: usize = 1024;

/// Reads the records of `stream` from version `from` up to `until`, calling `f` with each
/// decoded event.
pub fn for_each_event<S: Store + ?Sized>(
    store: &S,
    stream: StreamId,
    from: Version,
    until: Option<Version>,
    mut f: impl FnMut(Version, Event) -> Result<(), SessionError>,
) -> Result<(), SessionError> {
    let mut from = from.max(1);
    loop {
        let batch = store.read(stream, from, READ_CHUNK)?;
        let Some(last) = batch.last().map(|r| r.version) else { return Ok(()) };
        for rec in batch {
            if until.is_some_and(|u| rec.version > u) {
                return Ok(());
            }
            let ev = codec::decode(stream, rec.version, &rec.record)?;
            f(rec.version, ev)?;
        }
        from = last + 1;
    }
}

/// Reads back the messages `range` as appended: the state's own where it holds them (in the
/// view, unedited), the others from their `MessageAppended` records, reading the versions in
/// between in chunks.
pub fn load_messages<S: Store + ?Sized>(
    store: &S,
    stream: StreamId,
    state: &State,
    range: Range<u64>,
) -> Result<Vec<Arc<Message>>, SessionError> {
    let mut out: Vec<Option<Arc<Message>>> = range.clone().map(|seq| state.original(seq).cloned()).collect();
    let missing: Vec<u64> = range.clone().filter(|&seq| state.original(seq).is_none()).collect();
    let mut versions = Vec::with_capacity(missing.len());
    for &seq in &missing {
        let entry = state.entry(seq).ok_or(SessionError::Body {
            stream,
            seq,
            version: 0,
            detail: format!("the session has {} messages", state.message_count()),
        })?;
        versions.push((entry.version, seq));
    }
    let (Some(&(first, _)), Some(&(last, _))) = (versions.first(), versions.last()) else {
        return collect_loaded(out, stream, &range);
    };
    let mut wanted = versions.iter().copied().peekable();
    let mut from = first;
    while from <= last {
        // Never past the last wanted record: hydrating one message reads one record.
        let max = usize::try_from(last - from + 1).unwrap_or(READ_CHUNK).min(READ_CHUNK);
        let batch = store.read(stream, from, max)?;
        let Some(end) = batch.last().map(|r| r.version) else { break };
        for rec in batch {
            let Some(&(version, seq)) = wanted.peek() else { break };
            if rec.version != version {
                continue;
            }
            wanted.next();
            let fail = |detail: String| SessionError::Body { stream, seq, version, detail };
            match codec::decode(stream, version, &rec.record)? {
                Event::MessageAppended(e) if e.seq == seq => {
                    let slot = usize::try_from(seq - range.start).ok().and_then(|i| out.get_mut(i));
                    if let Some(slot) = slot {
                        *slot = Some(Arc::new(e.message));
                    }
                }
                Event::MessageAppended(e) => return Err(fail(format!("the record holds message {}", e.seq))),
                other => return Err(fail(format!("the record holds {}", other.name()))),
            }
        }
        from = match wanted.peek() {
            Some(&(next, _)) => next.max(end + 1),
            None => break,
        };
    }
    collect_loaded(out, stream, &range)
}

fn collect_loaded(
    out: Vec<Option<Arc<Message>>>,
    stream: StreamId,
    range: &Range<u64>,
) -> Result<Vec<Arc<Message>>, SessionError> {
    out.into_iter()
        .zip(range.clone())
        .map(|(m, seq)| {
            m.ok_or(SessionError::Body { stream, seq, version: 0, detail: "the log ends before its record".into() })
        })
        .collect()
}

/// Loads from `store` the messages `ev` needs and `state` does not hold
/// ([`State::bodies_needed`]), and hands them over ([`State::hydrate`]). Call it before applying
/// any event read from a log or decided live; for almost every event it does nothing.
pub fn hydrate<S: Store + ?Sized>(
    store: &S,
    stream: StreamId,
    state: &mut State,
    ev: &Event,
) -> Result<(), SessionError> {
    for seq in state.bodies_needed(ev) {
        let m = load_messages(store, stream, state, seq..seq + 1)?;
        if let Some(m) = m.into_iter().next() {
            state.hydrate(seq, m);
        }
    }
    Ok(())
}

/// A store's blob area as the renderer's blob source (a blob that cannot be read is missing).
pub(crate) struct StoreBlobs<'a, S: Store + ?Sized>(pub &'a S);

impl<S: Store + ?Sized> BlobSource for StoreBlobs<'_, S> {
    fn blob(&self, id: &BlobId) -> Option<Vec<u8>> {
        self.0.get_blob(id).ok().flatten()
    }
}
