//! Moving whole sessions between stores: blobs first (so no event ever refers to a missing
//! blob), then every record in one atomic append, so a copy is all or nothing.

use std::collections::BTreeSet;

use crate::codec;
use crate::event::Event;
use crate::replay::collect_blobs;
use crate::session::{SessionError, READ_CHUNK};
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
/// The target must not have the session yet.
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
    loop {
        let batch = from.read(id, next, READ_CHUNK)?;
        let Some(last) = batch.last().map(|r| r.version) else { break };
        for rec in batch {
            if let Event::MessageAppended(m) = codec::decode(id, rec.version, &rec.record)? {
                collect_blobs(&m.message, &mut blobs);
            }
            records.push(rec.record);
        }
        next = last + 1;
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
