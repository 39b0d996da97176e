//! Moving whole sessions between stores: blobs first (so no event ever refers to a missing
//! blob), then every record in one atomic append, so a copy is all or nothing. An import that
//! did not finish is not a session yet: it is not copied.

use std::collections::BTreeSet;

use crate::codec;
use crate::error::SessionError;
use crate::event::Event;
use crate::log::READ_CHUNK;
use crate::replay::collect_blobs;
use crate::store::{BlobId, ExpectedVersion, Record, Store, StreamId, Version};

/// What a copy moved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Copied {
    /// Records appended.
    pub records: u64,
    /// Blobs written.
    pub blobs: u64,
    /// Referenced blobs the source did not have (left as references).
    pub missing_blobs: Vec<BlobId>,
}

/// Copies session `id` from `from` to `to`, losslessly (the records' bytes are not re-encoded).
/// The target must not have the session yet; an unfinished import is refused
/// ([`SessionError::Unfinished`]).
pub fn copy_session<A: Store + ?Sized, B: Store + ?Sized>(
    from: &A,
    to: &B,
    id: StreamId,
) -> Result<Copied, SessionError> {
    if from.head(id)?.is_none() {
        return Err(SessionError::NotFound(id));
    }
    if to.head(id)?.is_some() {
        return Err(SessionError::Exists(id));
    }
    let mut records: Vec<Record> = Vec::new();
    let mut blobs = BTreeSet::new();
    let mut next: Version = 1;
    // (messages appended, messages announced) while an import is unfinished.
    let mut import: Option<(u64, u64)> = None;
    loop {
        let batch = from.read(id, next, READ_CHUNK)?;
        let Some(last) = batch.last().map(|r| r.version) else { break };
        for rec in batch {
            match codec::decode(id, rec.version, &rec.record)? {
                Event::MessageAppended(m) => {
                    collect_blobs(&m.message, &mut blobs);
                    if let Some((appended, _)) = &mut import {
                        *appended += 1;
                    }
                }
                Event::SessionStarted(s) => import = s.import.map(|i| (0, i.messages)),
                Event::ImportCompleted(_) => import = None,
                // The tools a served request carried: a fork summary reads them back.
                Event::RequestServed(r) => {
                    if let Some(crate::event::ToolsRecord::Blob { id, .. }) = r.request.map(|q| q.tools) {
                        blobs.insert(id);
                    }
                }
                _ => {}
            }
            records.push(rec.record);
        }
        next = last + 1;
    }
    if let Some((messages, announced)) = import {
        return Err(SessionError::Unfinished { stream: id, messages, announced });
    }
    let mut out = Copied { records: records.len() as u64, ..Copied::default() };
    for blob in blobs {
        match from.get_blob(&blob)? {
            Some(bytes) => {
                to.put_blob(&bytes)?;
                out.blobs += 1;
            }
            None => out.missing_blobs.push(blob),
        }
    }
    to.append(id, ExpectedVersion::Exact(0), &records)?;
    Ok(out)
}
