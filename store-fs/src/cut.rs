//! Is a scanned log whole? The scan says where the last whole frame ends; the anchor and the
//! snapshot say how far the stream was acknowledged. Only bytes beyond the acknowledged head
//! may be a torn write: a log that ends before it was cut short, whatever its end looks like.

use std::path::Path;

use ctxlog::store::{StoreError, StreamId, Version};

use crate::anchor::{self, Anchor, Found};
use crate::read;
use crate::scan::StreamLog;

/// What the log is, measured against what was acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The log holds every acknowledged version (the bytes after its last whole frame, if any,
    /// are beyond them: a torn write).
    Whole,
    /// Acknowledged versions are missing (up to `acknowledged`; `None` when the anchor is
    /// damaged and cannot say). A writer's open refuses unless it is told to accept the loss.
    Short { acknowledged: Option<Version>, detail: String },
    /// The log holds the anchored version, but with other bytes (in the frame at `offset`):
    /// damage nothing repairs.
    Rewritten { version: Version, offset: u64, detail: String },
}

/// Compares `log` with its anchor (`found`, read from `anchor_path`) and with the version of
/// its snapshot, if any (a snapshot is only stored for versions the log held).
pub(crate) fn judge(
    stream: StreamId,
    log: &StreamLog,
    found: &Found,
    anchor_path: &Path,
    snapshot: Option<(Version, &Path)>,
) -> Result<Verdict, StoreError> {
    let anchored = match found {
        Found::Current { anchor, .. } => Some(*anchor),
        Found::Missing => None,
        Found::Damaged(why) => {
            let detail = format!(
                "its anchor {} is damaged ({why}), so how far the log was acknowledged is unknown; {} holds \
                 versions 1..={} (ends at offset {})",
                anchor_path.display(),
                log.path.display(),
                log.head,
                log.len
            );
            return Ok(Verdict::Short { acknowledged: None, detail });
        }
    };
    let mut claims = Vec::new();
    if let Some(a) = anchored.filter(|a| a.head > log.head) {
        claims.push(format!("its anchor {} says version {} was acknowledged", anchor_path.display(), a.head));
    }
    if let Some((v, path)) = snapshot.filter(|(v, _)| *v > log.head) {
        claims.push(format!("its snapshot {} is at version {v}", path.display()));
    }
    let acknowledged = anchored.map_or(0, |a| a.head).max(snapshot.map_or(0, |(v, _)| v));
    if acknowledged > log.head {
        let from = log.head + 1;
        let detail = format!(
            "{} ends at version {} (offset {}) but {}: versions {from}..={acknowledged} ({} acknowledged versions) \
             are missing, the log was cut short",
            log.path.display(),
            log.head,
            log.len,
            claims.join(" and "),
            acknowledged - log.head
        );
        return Ok(Verdict::Short { acknowledged: Some(acknowledged), detail });
    }
    match anchored {
        Some(a) if a.head > 0 => check_anchored_record(stream, log, &a, anchor_path),
        _ => Ok(Verdict::Whole),
    }
}

/// The frame holding the anchored head must end where the anchor says and its last record
/// must hash as the anchor says: otherwise the log was rewritten, not cut.
fn check_anchored_record(
    stream: StreamId,
    log: &StreamLog,
    a: &Anchor,
    anchor_path: &Path,
) -> Result<Verdict, StoreError> {
    let idx = log.frames.partition_point(|f| f.first <= a.head).saturating_sub(1);
    let (offset, end) = log.frames.get(idx).map_or((0, 0), |f| (f.offset, f.offset + f.len));
    let rewritten = |detail: String| {
        Ok(Verdict::Rewritten {
            version: a.head,
            offset,
            detail: format!("{detail} ({} anchors version {} there)", anchor_path.display(), a.head),
        })
    };
    if end != a.end {
        return rewritten(format!(
            "the frame holding the anchored version ends at offset {end}, not at the anchored offset {}",
            a.end
        ));
    }
    let record = match read::read_records(stream, log, a.head, 1) {
        Ok(mut r) => r.pop(),
        Err(StoreError::Corrupt { detail, .. }) => return rewritten(detail),
        Err(e) => return Err(e),
    };
    match record {
        Some(r) if anchor::record_hash(r.record.as_bytes()) == a.hash => Ok(Verdict::Whole),
        _ => rewritten("the record at the anchored version does not hash to the anchored hash".to_owned()),
    }
}

/// The anchor of `log` as it stands: its head, where its last frame ends, its last record.
pub(crate) fn anchor_of(stream: StreamId, log: &StreamLog) -> Result<Anchor, StoreError> {
    if log.head == 0 {
        return Ok(Anchor::EMPTY);
    }
    let last = read::read_records(stream, log, log.head, 1)?;
    let hash = last.first().map_or([0; 16], |r| anchor::record_hash(r.record.as_bytes()));
    Ok(Anchor { head: log.head, end: log.len, hash })
}
