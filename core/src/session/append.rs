//! Appending messages: validated against the state without copying it (the hot path), media
//! payloads moved to the blob area first, then written and applied — or applied first and
//! written by the host ([`Session::append_pending`]).

use crate::codec;
use crate::error::SessionError;
use crate::event::{Event, MessageAppended};
use crate::media;
use crate::message::{BlobRef, Block, Content, ImageUrl, MediaData, MediaSource, Message};
use crate::store::{BlobId, ExpectedVersion, Record, Store, StreamId, Version};
use crate::wire;

use super::persist::Sync;
use super::Session;

/// What an append did.
#[derive(Debug, Clone, Default)]
pub struct Appended {
    /// Stream version after the append.
    pub version: Version,
    /// Blobs written (or found already present).
    pub blobs: Vec<BlobId>,
    /// Payloads kept inline because the blob could not be written, with the reason.
    pub inline_fallbacks: Vec<String>,
}

/// An append applied to its session but not written yet ([`Session::append_pending`]).
#[derive(Debug)]
#[must_use = "the session is ahead of its log until the append is written"]
pub struct PendingAppend {
    stream: StreamId,
    expected: Version,
    records: Vec<Record>,
}

impl PendingAppend {
    /// The stream version once written.
    pub fn version(&self) -> Version {
        self.expected + self.records.len() as u64
    }

    /// Writes the batch (atomically, at the version the session had before it). A conflict
    /// means the log moved under the session: nothing is written, the session must be reopened.
    pub fn write<S: Store + ?Sized>(self, store: &S) -> Result<Version, SessionError> {
        let _span =
            tracing::info_span!("ctxlog.append.write", session = %self.stream, version = self.expected).entered();
        Ok(store.append(self.stream, ExpectedVersion::Exact(self.expected), &self.records)?)
    }
}

impl<S: Store> Session<S> {
    /// Appends messages as one atomic batch. Media payloads go to the blob area first.
    ///
    /// ```
    /// # use ctxlog::{Timestamp, parse_message, Config, MemoryStore, Session, StreamId, WireFormat};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = MemoryStore::new();
    /// # let mut session = Session::create(&store, StreamId::random(), WireFormat::Anthropic, Config::default(), Timestamp::from_millis(1_000))?;
    /// # session.append(vec![parse_message(r#"{"role":"user","content":"hi"}"#)?])?;
    /// let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
    /// let appended = session.append(vec![parse_message(&format!(
    ///     r#"{{"role":"user","content":[{{"type":"text","text":"this screen"}},{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{png}"}}}}]}}"#
    /// ))?])?;
    /// assert_eq!(appended.blobs.len(), 1); // the image went to the blob area; the log keeps a reference
    /// # Ok(()) }
    /// ```
    pub fn append(&mut self, messages: Vec<Message>) -> Result<Appended, SessionError> {
        self.append_with(messages, Sync::Now)
    }

    /// [`Session::append`] whose sync to stable storage is left to the session's next write
    /// (see [`Store::append_unsynced`]): written and safe from a crash of this process when it
    /// returns, safe from a crash of the machine once the next write (e.g. the call's commit)
    /// lands. The proxy appends a request's messages this way before forwarding it, so a call
    /// costs one sync, the commit's, which still comes before the client has the answer.
    pub fn append_unsynced(&mut self, messages: Vec<Message>) -> Result<Appended, SessionError> {
        self.append_with(messages, Sync::WithNext)
    }

    fn append_with(&mut self, messages: Vec<Message>, sync: Sync) -> Result<Appended, SessionError> {
        let _span =
            tracing::info_span!("ctxlog.append", session = %self.stream, version = self.state.version()).entered();
        let (events, mut report) = self.append_events(messages)?;
        let messages = events.len();
        report.version = self.persist_then_apply_with(events, sync)?;
        for reason in &report.inline_fallbacks {
            tracing::warn!(%reason, "a media payload stays inline: its blob could not be written");
        }
        tracing::debug!(messages, blobs = report.blobs.len(), version = report.version, "appended");
        Ok(report)
    }

    /// [`Session::append`], but the batch is applied to the session first and written later
    /// by [`PendingAppend::write`], which the host may run on another thread while it plans,
    /// renders and sends the call (a proxy overlaps the store's fsync with the upstream
    /// request this way). Media payloads still go to the blob area here.
    ///
    /// Until the batch is written, every other write of this session fails with a conflict
    /// (the store is behind the session), so nothing can be committed on top of it. If the
    /// write fails, the session is ahead of its log: drop it and [`Session::open`] it again.
    ///
    /// ```
    /// # use ctxlog::{Timestamp, parse_message, Config, MemoryStore, Session, StreamId, WireFormat};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let mut session = Session::create(&store, StreamId::random(), WireFormat::Anthropic, Config::default(), Timestamp::from_millis(1_000))?;
    /// let (_, pending) = session.append_pending(vec![parse_message(r#"{"role":"user","content":"hi"}"#)?])?;
    /// let plan = session.plan(Timestamp::from_millis(2_000))?; // plans on the appended message
    /// assert_eq!(plan.view_messages, 1);
    /// pending.write(&store)?; // e.g. on another thread, while the request is on its way
    /// session.commit(plan, Timestamp::from_millis(2_500), None)?;
    /// # Ok(()) }
    /// ```
    pub fn append_pending(&mut self, messages: Vec<Message>) -> Result<(Appended, PendingAppend), SessionError> {
        let _span = tracing::info_span!("ctxlog.append", session = %self.stream, version = self.state.version(), pending = true)
            .entered();
        let (events, mut report) = self.append_events(messages)?;
        let records =
            events.iter().map(codec::encode).collect::<Result<Vec<Record>, _>>().map_err(SessionError::Encode)?;
        let expected = self.state.version();
        let first = expected + 1;
        for (i, ev) in events.iter().enumerate() {
            let stream = self.stream;
            self.state
                .apply(first + i as u64, ev)
                .map_err(|violation| SessionError::Invariant { stream, violation })?;
        }
        report.version = self.state.version();
        Ok((report, PendingAppend { stream: self.stream, expected, records }))
    }

    /// The `MessageAppended` events of an append, validated against the state.
    pub(super) fn append_events(&mut self, messages: Vec<Message>) -> Result<(Vec<Event>, Appended), SessionError> {
        let format = self.format();
        for (index, m) in messages.iter().enumerate() {
            wire::check_format(m, format).map_err(|error| SessionError::Message { index, error })?;
        }
        let estimator = self.config().estimator();
        let mut report = Appended::default();
        let mut events = Vec::with_capacity(messages.len());
        for (i, mut m) in messages.into_iter().enumerate() {
            self.externalize(&mut m, &mut report);
            let tokens = estimator.message(&m);
            events.push(Event::MessageAppended(MessageAppended {
                seq: self.state.message_count() + i as u64,
                message: m,
                tokens,
            }));
        }
        // Validate without copying the state (appends are the hot path); the caller persists
        // and applies.
        self.state.check_appends(self.state.version() + 1, &events).map_err(|v| self.refused(v))?;
        Ok((events, report))
    }

    fn externalize(&self, m: &mut Message, report: &mut Appended) {
        if let Some(Content::Blocks(blocks)) = &mut m.content {
            for b in blocks {
                self.externalize_block(b, report);
            }
        }
    }

    fn externalize_block(&self, b: &mut Block, report: &mut Appended) {
        match b {
            Block::Media { source: MediaSource::Base64 { data, .. }, .. } => self.externalize_data(data, report),
            Block::ImageUrl { url: ImageUrl::Data { data, .. }, .. } => self.externalize_data(data, report),
            Block::ToolResult { content: Some(Content::Blocks(inner)), .. } => {
                for b in inner {
                    self.externalize_block(b, report);
                }
            }
            _ => {}
        }
    }

    fn externalize_data(&self, data: &mut MediaData, report: &mut Appended) {
        let MediaData::Inline(b64) = data else { return };
        let Ok(bytes) = wire::decode_base64(b64) else {
            report.inline_fallbacks.push("payload is not valid base64".into());
            return;
        };
        match self.store.put_blob(&bytes) {
            Ok(id) => {
                let dims = media::dimensions(&bytes);
                report.blobs.push(id.clone());
                *data = MediaData::Blob(BlobRef {
                    id,
                    bytes: bytes.len() as u64,
                    width: dims.map(|d| d.0),
                    height: dims.map(|d| d.1),
                });
            }
            Err(e) => report.inline_fallbacks.push(e.to_string()),
        }
    }
}
