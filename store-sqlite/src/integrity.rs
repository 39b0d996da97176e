//! What `verify` asks of the database as a whole: SQLite's own `integrity_check`, and that
//! every stream holds exactly the versions `1..=head` its `heads` row promises, ending with the
//! record whose hash it keeps.

use std::collections::{BTreeMap, BTreeSet};

use ctxlog::store::{IntegrityReport, StoreError, StreamId};
use rusqlite::{params, Connection};

use crate::{err, schema, BACKEND};

/// Most lines of `integrity_check` output reported (the first ones locate the damage).
const MAX_INTEGRITY_LINES: usize = 20;

fn stream_id(bytes: &[u8], location: &str, table: &str) -> Result<StreamId, StoreError> {
    uuid::Uuid::from_slice(bytes).map(StreamId).map_err(|e| StoreError::Damaged {
        backend: BACKEND,
        location: location.to_owned(),
        detail: format!("the {table} table holds a malformed stream id ({} bytes): {e}", bytes.len()),
    })
}

/// Every stream, from the records and (with the mirror) from `heads`: a stream only one of
/// them knows is listed, so that reading it reports the damage.
pub(crate) fn streams(conn: &Connection, location: &str, mirror: bool) -> Result<Vec<StreamId>, StoreError> {
    // A skip-scan over the primary key: one index seek per stream instead of the full table
    // scan `SELECT DISTINCT` does on a WITHOUT ROWID table.
    let mut stmt = conn
        .prepare_cached(
            "WITH RECURSIVE s(stream) AS (
                 SELECT MIN(stream) FROM records
                 UNION ALL
                 SELECT (SELECT MIN(stream) FROM records WHERE stream > s.stream) FROM s WHERE s.stream IS NOT NULL
             )
             SELECT stream FROM s WHERE stream IS NOT NULL",
        )
        .map_err(|e| err(location, "prepare streams", e))?;
    let mut out = BTreeSet::new();
    let rows = stmt.query_map([], |r| r.get::<_, Vec<u8>>(0)).map_err(|e| err(location, "list streams", e))?;
    for row in rows {
        out.insert(stream_id(&row.map_err(|e| err(location, "list streams", e))?, location, "records")?);
    }
    if mirror {
        let mut stmt =
            conn.prepare_cached("SELECT stream FROM heads").map_err(|e| err(location, "prepare streams", e))?;
        let rows = stmt.query_map([], |r| r.get::<_, Vec<u8>>(0)).map_err(|e| err(location, "list heads", e))?;
        for row in rows {
            out.insert(stream_id(&row.map_err(|e| err(location, "list heads", e))?, location, "heads")?);
        }
    }
    Ok(out.into_iter().collect())
}

/// `integrity_check`, then the versions of every stream against its `heads` row.
pub(crate) fn check(conn: &Connection, location: &str, mirror: bool) -> IntegrityReport {
    let mut report = IntegrityReport::default();
    match integrity_check(conn) {
        Ok(lines) => report.problems.extend(
            lines.into_iter().take(MAX_INTEGRITY_LINES).map(|l| format!("{location}: PRAGMA integrity_check: {l}")),
        ),
        Err(e) => report.problems.push(format!("{location}: PRAGMA integrity_check failed: {e}")),
    }
    if let Err(e) = versions(conn, location, mirror, &mut report.problems) {
        report.problems.push(format!("{location}: cannot check the versions of each stream: {e}"));
    }
    if !mirror {
        report.notes.push(format!(
            "{location}: schema version 1 keeps no mirror of the heads; a writer's open upgrades it (to version {})",
            schema::SCHEMA_VERSION
        ));
    }
    report
}

fn integrity_check(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare("PRAGMA integrity_check")?;
    let lines = stmt.query_map([], |r| r.get::<_, String>(0))?.collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(lines.into_iter().filter(|l| l != "ok").collect())
}

/// (count, min, max) of each stream's versions, and its `heads` row.
type Seen = (Option<(i64, i64, i64)>, Option<(i64, Vec<u8>)>);

fn versions(conn: &Connection, location: &str, mirror: bool, problems: &mut Vec<String>) -> rusqlite::Result<()> {
    let mut streams: BTreeMap<Vec<u8>, Seen> = BTreeMap::new();
    let mut stmt = conn.prepare("SELECT stream, COUNT(*), MIN(version), MAX(version) FROM records GROUP BY stream")?;
    for row in stmt.query_map([], |r| Ok((r.get::<_, Vec<u8>>(0)?, (r.get(1)?, r.get(2)?, r.get(3)?))))? {
        let (stream, counts) = row?;
        streams.entry(stream).or_default().0 = Some(counts);
    }
    if mirror {
        let mut stmt = conn.prepare("SELECT stream, head, last_hash FROM heads")?;
        for row in stmt.query_map([], |r| Ok((r.get::<_, Vec<u8>>(0)?, (r.get(1)?, r.get(2)?))))? {
            let (stream, head) = row?;
            streams.entry(stream).or_default().1 = Some(head);
        }
    }
    for (sid, (counts, head)) in streams {
        let name =
            uuid::Uuid::from_slice(&sid).map_or_else(|_| format!("(malformed id {sid:02x?})"), |u| u.to_string());
        let mut bad = |what: String| problems.push(format!("stream {name}: {location}: {what}"));
        let (count, min, max) = counts.unwrap_or((0, 0, 0));
        if count > 0 && (min != 1 || count != max) {
            bad(format!("versions are not dense: {count} rows from version {min} to version {max}"));
        }
        if !mirror {
            continue;
        }
        match head {
            None => bad(format!("records up to version {max} but no row in the heads table")),
            Some((head, _)) if head != max => {
                bad(format!("the heads table says version {head} is the last, the records table ends at version {max}"))
            }
            Some((head, hash)) => {
                let last: Option<Vec<u8>> = conn
                    .prepare_cached("SELECT bytes FROM records WHERE stream = ?1 AND version = ?2")?
                    .query_row(params![sid, head], |r| r.get(0))
                    .ok();
                if last.as_deref().map(schema::last_hash).as_ref().map(|h| &h[..]) != Some(&hash[..]) {
                    bad(format!("the record at version {head} is not the one the heads table recorded"));
                }
            }
        }
    }
    Ok(())
}
