//! `import` (and `demo`): a validated transcript through the engine, call by call, on a
//! simulated clock, written to the target store as it goes.
//!
//! Memory stays bounded by the session's view, not by the transcript: lines are read one at a
//! time, the session is the live one over the target, and its records reach the target in
//! chunks of [`CHUNK_BYTES`] (`Buffered`). Atomicity comes from a completion marker: the
//! session is created as an import (`SessionStarted.import` announces the transcript's sha256
//! and message count) and is complete only once `ImportCompleted` is written, last. Until then
//! readers treat it as absent (`Session::open` refuses it, `copy` skips it, `verify` reports
//! it), so a failed import leaves no session behind. A retried import of the same transcript
//! with the same options resumes it where the log ends; anything else is refused.

use std::io::Write;
use std::sync::{Mutex, MutexGuard};

use ctxlog::config::Config;
use ctxlog::event::{Event, ImportSource};
use ctxlog::internal::view::{render_item_with, ViewCache};
use ctxlog::internal::wire::{parse_timestamp_ms, BlobSource, Media, RenderOpts};
use ctxlog::message::{Message, Role};
use ctxlog::replay::{CallRecord, Timeline};
use ctxlog::session::{hydrate, new_session_id, READ_CHUNK};
use ctxlog::store::{check_expected, StoredRecord};
use ctxlog::time::Millis;
use ctxlog::{
    BlobId, ExpectedVersion, Record, Session, SessionError, Snapshot, State, Store, StoreError, StreamId, Timestamp,
    Version,
};

use crate::error::{output, CliError};
use crate::transcript::Source;

/// Simulated start when no line carries a timestamp: 2026-01-01T00:00:00Z.
pub const DEFAULT_START_MS: Millis = 1_767_225_600_000;

/// Records are written to the target in appends of about this many bytes.
pub const CHUNK_BYTES: usize = 4 << 20;

/// How to import.
pub struct ImportOptions<'a> {
    /// Engine knobs.
    pub config: Config,
    /// Session id (random if `None`).
    pub session: Option<StreamId>,
    /// Simulated time between calls for lines without a timestamp.
    pub call_interval_ms: Millis,
    /// Receives each call's view as one JSONL line.
    pub views: Option<&'a mut dyn Write>,
    /// Inline media in `views`.
    pub inline_media: bool,
    /// A model writes the summaries (`None`: the built-in extractive summarizer). Each call is
    /// then committed with its request record, so forks can append to it.
    pub summaries: Option<crate::summarizer::ModelSummaries<'a>>,
}

/// What an import did.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The session id.
    pub session: StreamId,
    /// One record per call.
    pub timeline: Vec<CallRecord>,
    /// Messages appended.
    pub messages: u64,
    /// Records in the session.
    pub records: u64,
    /// Blobs written to the target (or found there already) by this run.
    pub blobs: u64,
    /// The import resumed an unfinished one whose log ended at this version.
    pub resumed_at: Option<Version>,
    /// Summary attempts after the last call (what `replay` lists after it too).
    pub trailing: ctxlog::replay::Trailing,
}

/// Runs `transcript` through the engine, writing the session to `target` as it goes.
pub fn import(
    transcript: &dyn Source,
    target: &dyn Store,
    opts: ImportOptions<'_>,
    on_call: impl FnMut(&CallRecord) -> Result<(), CliError>,
) -> Result<Imported, CliError> {
    import_in_chunks(transcript, target, opts, CHUNK_BYTES, on_call)
}

/// [`import`], writing to the target in appends of about `chunk_bytes` (tests use small chunks
/// to interrupt an import half-way).
pub fn import_in_chunks(
    transcript: &dyn Source,
    target: &dyn Store,
    mut opts: ImportOptions<'_>,
    chunk_bytes: usize,
    mut on_call: impl FnMut(&CallRecord) -> Result<(), CliError>,
) -> Result<Imported, CliError> {
    let id = opts.session.unwrap_or_else(new_session_id);
    let facts = transcript.facts();
    let start = facts.first_timestamp.as_ref().and_then(|t| parse_timestamp_ms(t).ok()).unwrap_or(DEFAULT_START_MS);
    let source = ImportSource {
        transcript_sha256: facts.sha256.clone(),
        transcript_bytes: facts.bytes,
        messages: facts.messages,
        call_interval_ms: opts.call_interval_ms,
    };
    let store = Buffered::new(target, id, chunk_bytes)?;
    let mut timeline = Timeline::new();
    let mut records = Vec::new();
    let (mut session, resumed_at) = match target.head(id)? {
        None => {
            let s = Session::create_import(
                &store,
                id,
                transcript.format(),
                opts.config.clone(),
                Timestamp::from_millis(start),
                source,
            )?;
            (s, None)
        }
        Some(head) => {
            let s = Session::open_import(&store, id)?;
            check_resumable(s.state(), id, transcript, &opts.config, start, &source)?;
            records = replay_prefix(&store, id, &mut opts, &mut on_call)?;
            (s, Some(head))
        }
    };
    // Where the log ends: a retried import skips what it already holds.
    let (done_messages, done_calls) = (session.state().message_count(), session.state().calls());
    let mut blobs = 0;
    let mut pending: Vec<Message> = Vec::new();
    let mut clock = start;
    let (mut seq, mut call) = (0u64, 0u64);
    for m in transcript.messages() {
        let m = m?;
        if m.role == Role::Assistant {
            let stamped = m.meta.timestamp.as_ref().and_then(|t| parse_timestamp_ms(t).ok());
            // A call's clock never goes backwards, even if the transcript's does.
            clock = stamped.unwrap_or(clock + opts.call_interval_ms).max(clock);
            if call >= done_calls {
                if !pending.is_empty() {
                    blobs += session.append(std::mem::take(&mut pending))?.blobs.len() as u64;
                }
                let reported = m.meta.usage.as_ref().and_then(|u| ctxlog::internal::wire::usage_of(u).ok().flatten());
                let plan = session.plan(Timestamp::from_millis(clock))?;
                if let Some(w) = opts.views.as_deref_mut() {
                    let messages: Vec<Vec<u8>> = if opts.inline_media {
                        session.render_plan(&plan).0.into_iter().map(String::into_bytes).collect()
                    } else {
                        session.plan_view(&plan).iter().map(|b| b.strip_suffix(b"\n").unwrap_or(b).to_vec()).collect()
                    };
                    write_view(w, plan.call(), messages)?;
                }
                let at = Timestamp::from_millis(clock);
                let committed = match &opts.summaries {
                    Some(m) => session.commit_request(plan, &m.request_options(), at, reported)?,
                    None => session.commit(plan, at, reported)?,
                };
                let first = committed.version + 1 - committed.events.len() as u64;
                for (i, ev) in committed.events.iter().enumerate() {
                    if let Some(rec) = timeline.feed(first + i as u64, ev, session.state()) {
                        on_call(&rec)?;
                        records.push(rec);
                    }
                }
                let written = summarize(&mut session, opts.summaries.as_ref())?;
                feed(&mut timeline, written, &session);
            } else if call + 1 == done_calls && done_messages <= seq {
                // The log ends right after this call: its summary jobs may have been cut short.
                let written = summarize(&mut session, opts.summaries.as_ref())?;
                feed(&mut timeline, written, &session);
            }
            call += 1;
        }
        if seq >= done_messages {
            pending.push(m);
        }
        seq += 1;
    }
    if !pending.is_empty() {
        blobs += session.append(pending)?.blobs.len() as u64;
    }
    let completed = session.complete_import()?;
    store.flush()?;
    // The snapshot is a cache; failing to write it loses nothing.
    let _ = session.snapshot();
    Ok(Imported {
        session: id,
        timeline: records,
        messages: session.state().message_count(),
        records: completed.version,
        blobs,
        resumed_at,
        trailing: timeline.trailing(),
    })
}

/// At most this many model summary attempts run between two calls.
const MODEL_JOBS_BETWEEN_CALLS: usize = 64;

/// Prepare runs between calls, as a host would run its summarizer in the background: every job
/// the engine has (a span of messages, condensing summaries), until none is left or one is
/// discarded (asking again would only repeat it). The extractive jobs end: each accepted one
/// moves the compacted prefix forward or lowers the number of current summaries. A model's
/// attempts are bounded too, as each is a network call.
fn summarize<S: Store>(
    session: &mut Session<S>,
    model: Option<&crate::summarizer::ModelSummaries<'_>>,
) -> Result<Vec<ctxlog::Committed>, CliError> {
    if let Some(m) = model {
        return m.run(session, MODEL_JOBS_BETWEEN_CALLS);
    }
    session.run_summaries(&mut ctxlog::Extractive, usize::MAX)?;
    Ok(Vec::new())
}

/// Feeds the batches a model's summary attempts wrote to the timeline: the attempts (and their
/// guards) go into the next call's record, as a replay of the log puts them.
fn feed<S: Store>(timeline: &mut Timeline, written: Vec<ctxlog::Committed>, session: &Session<S>) {
    for c in written {
        let first = c.version + 1 - c.events.len() as u64;
        for (i, ev) in c.events.iter().enumerate() {
            timeline.feed(first + i as u64, ev, session.state());
        }
    }
}

/// An unfinished import may only be resumed by the same transcript with the same options: the
/// log then holds exactly what this run would have written first.
fn check_resumable(
    state: &State,
    id: StreamId,
    transcript: &dyn Source,
    config: &Config,
    start: Millis,
    source: &ImportSource,
) -> Result<(), CliError> {
    let info = state.info();
    let stored = state.import().map(|i| &i.source);
    let differs = if stored != Some(source) {
        stored.map_or_else(
            || "no transcript".to_owned(),
            |s| {
                format!(
                    "transcript sha256 {} ({} bytes), call interval {} ms",
                    s.transcript_sha256, s.transcript_bytes, s.call_interval_ms
                )
            },
        )
    } else if info.map(|i| i.format) != Some(transcript.format()) {
        "another format".to_owned()
    } else if info.map(|i| &i.config) != Some(config) {
        "other engine options".to_owned()
    } else if info.map(|i| i.started_at) != Some(start) {
        "another start time".to_owned()
    } else {
        return Ok(());
    };
    Err(CliError::Usage(format!(
        "session {id} holds an unfinished import of another transcript or with other options ({differs}); \
         retry with the same file and options, or import under another --session"
    )))
}

/// The timeline (and views) of the calls an unfinished import already committed, so a resumed
/// import reports the whole session.
fn replay_prefix(
    store: &dyn Store,
    id: StreamId,
    opts: &mut ImportOptions<'_>,
    on_call: &mut impl FnMut(&CallRecord) -> Result<(), CliError>,
) -> Result<Vec<CallRecord>, CliError> {
    let mut state = State::new();
    let mut timeline = Timeline::new();
    let mut cache = ViewCache::new();
    let mut records = Vec::new();
    let mut from = 1;
    loop {
        let batch = store.read(id, from, READ_CHUNK)?;
        let Some(last) = batch.last().map(|r| r.version) else { break };
        for rec in batch {
            let ev = ctxlog::codec::decode(id, rec.version, &rec.record).map_err(SessionError::from)?;
            if let (Event::RequestServed(s), Some(w)) = (&ev, opts.views.as_deref_mut()) {
                // The view this call served is the state right before its RequestServed.
                let messages: Vec<Vec<u8>> = if opts.inline_media {
                    let blobs = StoreBlobs(store);
                    let render = RenderOpts { meta: false, media: Media::Inline(&blobs) };
                    let strip = |b: &[u8]| b.strip_suffix(b"\n").unwrap_or(b).to_vec();
                    state
                        .view()
                        .iter()
                        .map(|it| strip(&render_item_with(&state, it.item, render, &mut Vec::new())))
                        .collect()
                } else {
                    cache.sync(&state);
                    cache.bytes().iter().map(|b| b.strip_suffix(b"\n").unwrap_or(b).to_vec()).collect()
                };
                write_view(w, s.call, messages)?;
            }
            hydrate(store, id, &mut state, &ev)?;
            state.apply(rec.version, &ev).map_err(|violation| SessionError::Invariant { stream: id, violation })?;
            if let Some(r) = timeline.feed(rec.version, &ev, &state) {
                on_call(&r)?;
                records.push(r);
            }
        }
        from = last + 1;
    }
    Ok(records)
}

fn write_view(w: &mut dyn Write, call: u64, messages: Vec<Vec<u8>>) -> Result<(), CliError> {
    let mut line = format!("{{\"call\":{call},\"messages\":[").into_bytes();
    for (i, m) in messages.iter().enumerate() {
        if i > 0 {
            line.push(b',');
        }
        line.extend_from_slice(m);
    }
    line.extend_from_slice(b"]}\n");
    w.write_all(&line).map_err(output("the views file"))
}

struct StoreBlobs<'a>(&'a dyn Store);

impl BlobSource for StoreBlobs<'_> {
    fn blob(&self, id: &BlobId) -> Option<Vec<u8>> {
        self.0.get_blob(id).ok().flatten()
    }
}

/// The target store with a write buffer for the imported stream: its appends collect in memory
/// up to a chunk ([`CHUNK_BYTES`]) and reach the target as one append of whole batches, so a long import
/// costs a few dozen durable writes rather than one per call, and the log always ends at a
/// batch boundary. Reads of the stream see the buffer. Nothing buffered counts until
/// [`Buffered::flush`]; the import writes `ImportCompleted` last and then flushes.
struct Buffered<'a> {
    target: &'a dyn Store,
    stream: StreamId,
    chunk_bytes: usize,
    pending: Mutex<Pending>,
}

struct Pending {
    /// The stream's head in the target.
    head: Version,
    records: Vec<Record>,
    bytes: usize,
}

impl<'a> Buffered<'a> {
    fn new(target: &'a dyn Store, stream: StreamId, chunk_bytes: usize) -> Result<Self, StoreError> {
        let head = target.head(stream)?.unwrap_or(0);
        let pending = Mutex::new(Pending { head, records: Vec::new(), bytes: 0 });
        Ok(Buffered { target, stream, chunk_bytes, pending })
    }

    fn lock(&self) -> MutexGuard<'_, Pending> {
        // A panic while holding the lock leaves whole batches in the buffer: still consistent.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn flush(&self) -> Result<(), StoreError> {
        Self::flush_locked(self.target, self.stream, &mut self.lock())
    }

    fn flush_locked(target: &dyn Store, stream: StreamId, p: &mut Pending) -> Result<(), StoreError> {
        if p.records.is_empty() {
            return Ok(());
        }
        p.head = target.append(stream, ExpectedVersion::Exact(p.head), &p.records)?;
        p.records.clear();
        p.bytes = 0;
        Ok(())
    }
}

impl Store for Buffered<'_> {
    fn append(&self, stream: StreamId, expected: ExpectedVersion, records: &[Record]) -> Result<Version, StoreError> {
        if stream != self.stream {
            return self.target.append(stream, expected, records);
        }
        let mut p = self.lock();
        let head = p.head + p.records.len() as Version;
        check_expected(stream, expected, head)?;
        p.records.extend_from_slice(records);
        p.bytes += records.iter().map(|r| r.as_bytes().len()).sum::<usize>();
        if p.bytes >= self.chunk_bytes {
            Self::flush_locked(self.target, stream, &mut p)?;
        }
        Ok(head + records.len() as Version)
    }

    fn read(&self, stream: StreamId, from: Version, max: usize) -> Result<Vec<StoredRecord>, StoreError> {
        if stream != self.stream {
            return self.target.read(stream, from, max);
        }
        let p = self.lock();
        let from = from.max(1);
        let mut out = if from <= p.head {
            let stored = usize::try_from(p.head - from + 1).unwrap_or(usize::MAX);
            self.target.read(stream, from, max.min(stored))?
        } else {
            Vec::new()
        };
        let next = from.max(p.head + 1);
        let skip = usize::try_from(next - p.head - 1).unwrap_or(usize::MAX);
        for (i, record) in p.records.iter().enumerate().skip(skip) {
            if out.len() >= max {
                break;
            }
            out.push(StoredRecord { version: p.head + 1 + i as Version, record: record.clone() });
        }
        Ok(out)
    }

    fn head(&self, stream: StreamId) -> Result<Option<Version>, StoreError> {
        if stream != self.stream {
            return self.target.head(stream);
        }
        let p = self.lock();
        let head = p.head + p.records.len() as Version;
        Ok((head > 0).then_some(head))
    }

    fn streams(&self) -> Result<Vec<StreamId>, StoreError> {
        let mut all = self.target.streams()?;
        if !self.lock().records.is_empty() && !all.contains(&self.stream) {
            all.push(self.stream);
            all.sort();
        }
        Ok(all)
    }

    fn put_snapshot(&self, stream: StreamId, snap: &Snapshot) -> Result<(), StoreError> {
        if stream == self.stream {
            self.flush()?;
        }
        self.target.put_snapshot(stream, snap)
    }

    fn get_snapshot(&self, stream: StreamId) -> Result<Option<Snapshot>, StoreError> {
        self.target.get_snapshot(stream)
    }

    fn put_blob(&self, bytes: &[u8]) -> Result<BlobId, StoreError> {
        self.target.put_blob(bytes)
    }

    fn get_blob(&self, id: &BlobId) -> Result<Option<Vec<u8>>, StoreError> {
        self.target.get_blob(id)
    }
}
