//! The tables, their version (like SQLite's `user_version`, kept in `ctxlog_meta`) and the
//! migrations that bring an older schema up to this build's.
//!
//! Tables are created in the first schema of the connection's `search_path`, so one database
//! can hold several independent logs (`?options=-c%20search_path%3Dother`).

use ctxlog::store::StoreError;
use postgres::{Client, GenericClient};

use crate::error::{backend, full_message, store_error, PgError, BACKEND};

/// The schema this build reads and writes.
pub const SCHEMA_VERSION: u64 = 1;

/// `MIGRATIONS[i]` takes a schema at version `i` to version `i + 1`. A released step is never
/// edited: a change is a new step.
const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = [
    // 1: the log, the blob area and the snapshots.
    "CREATE TABLE ctxlog_meta (key text PRIMARY KEY, value bigint NOT NULL);
     CREATE TABLE ctxlog_records (
         stream uuid NOT NULL,
         version bigint NOT NULL CHECK (version > 0),
         bytes bytea NOT NULL,
         PRIMARY KEY (stream, version)
     );
     CREATE TABLE ctxlog_blobs (id text PRIMARY KEY, bytes bytea NOT NULL);
     -- Media is already compressed: store it out of line without a second compression pass.
     ALTER TABLE ctxlog_blobs ALTER COLUMN bytes SET STORAGE EXTERNAL;
     CREATE TABLE ctxlog_snapshots (stream uuid PRIMARY KEY, version bigint NOT NULL, bytes bytea NOT NULL);",
];

/// Serialises schema changes of concurrent opens (any schema of the database): "ctxlog" in ASCII.
const MIGRATION_LOCK: i64 = 0x6374_786c_6f67;

/// The schema version found, `None` if there is no ctxlog schema.
fn found_version(client: &mut impl GenericClient) -> Result<Option<u64>, postgres::Error> {
    let present: bool = client.query_one("SELECT to_regclass('ctxlog_meta') IS NOT NULL", &[])?.try_get(0)?;
    if !present {
        return Ok(None);
    }
    let row = client.query_opt("SELECT value FROM ctxlog_meta WHERE key = 'schema_version'", &[])?;
    let value: i64 = match row {
        Some(r) => r.try_get(0)?,
        None => 0,
    };
    Ok(Some(u64::try_from(value).unwrap_or(0)))
}

/// Checks the schema; a writer's open creates or migrates it, a read-only open only checks.
pub(crate) fn prepare(client: &mut Client, location: &str, read_only: bool) -> Result<(), StoreError> {
    let err = |what: &str, e| store_error(location, what, e);
    let schema_error = |found| StoreError::Schema {
        backend: BACKEND,
        location: location.to_owned(),
        found,
        supported: SCHEMA_VERSION,
    };
    match found_version(client).map_err(|e| err("read the schema version", e))? {
        Some(SCHEMA_VERSION) => return check_privileges(client, location, read_only),
        Some(found) if found > SCHEMA_VERSION || read_only => return Err(schema_error(found)),
        None if read_only => return Err(backend(location, "open read-only", PgError::NoSchema)),
        _ => {}
    }
    // A session-level lock taken in its own transaction: the migration transaction then
    // starts after it, so its catalog lookups see tables another open created meanwhile
    // (a transaction-level lock taken inside would leave them invisible to `to_regclass`).
    client.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK]).map_err(|e| err("lock the schema", e))?;
    let migrated = migrate(client).map_err(|(what, e)| match e.code().map(|c| c.code()) {
        // insufficient_privilege, invalid_schema_name ("no schema has been selected").
        Some("42501" | "3F000") => cannot_create(client, location, &e),
        _ => err(what, e),
    });
    let unlocked = client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]);
    match migrated? {
        Some(found) => return Err(schema_error(found)),
        None => unlocked.map_err(|e| err("unlock the schema", e))?,
    };
    Ok(())
}

/// The role and the schema tables would be created in (`current_schema()` is NULL when no
/// schema of the `search_path` exists).
fn role_and_schema(client: &mut Client) -> (String, Option<String>) {
    match client.query_one("SELECT current_user::text, current_schema()::text", &[]) {
        Ok(row) => (row.try_get(0).unwrap_or_default(), row.try_get(1).ok().flatten()),
        Err(_) => (String::from("(unknown)"), None),
    }
}

/// Why a writer's open could not create or migrate the tables, naming the missing privilege.
fn cannot_create(client: &mut Client, location: &str, e: &postgres::Error) -> StoreError {
    let (role, schema) = role_and_schema(client);
    let message = match schema {
        Some(schema) => format!(
            "role {role} lacks CREATE on schema {schema}, so it cannot create the ctxlog tables: open the store \
             once as a role that may (the schema's owner), then GRANT SELECT, INSERT, UPDATE ON ctxlog_meta, \
             ctxlog_records, ctxlog_blobs, ctxlog_snapshots TO {role}; or GRANT CREATE ON SCHEMA {schema} TO {role} \
             ({})",
            full_message(e)
        ),
        None => format!(
            "no schema of the search_path exists, so role {role} has nowhere to create the ctxlog tables: create \
             the schema (CREATE SCHEMA … AUTHORIZATION {role}) or fix search_path in the URL's options ({})",
            full_message(e)
        ),
    };
    backend(location, "create the schema", PgError::Privilege(message))
}

/// The privileges a store needs on its tables, checked when it opens an existing schema (so a
/// missing `GRANT` fails the open, naming it, instead of the first append).
fn check_privileges(client: &mut Client, location: &str, read_only: bool) -> Result<(), StoreError> {
    const NEEDED: [(&str, &str, bool); 8] = [
        ("ctxlog_meta", "SELECT", true),
        ("ctxlog_records", "SELECT", true),
        ("ctxlog_records", "INSERT", false),
        ("ctxlog_blobs", "SELECT", true),
        ("ctxlog_blobs", "INSERT", false),
        ("ctxlog_snapshots", "SELECT", true),
        ("ctxlog_snapshots", "INSERT", false),
        ("ctxlog_snapshots", "UPDATE", false),
    ];
    let (tables, privileges): (Vec<&str>, Vec<&str>) =
        NEEDED.iter().filter(|(_, _, reader)| *reader || !read_only).map(|(t, p, _)| (*t, *p)).unzip();
    // One round trip for all of them.
    let rows = client
        .query(
            "SELECT t, p FROM unnest($1::text[], $2::text[]) AS v(t, p) WHERE NOT has_table_privilege(t, p)",
            &[&tables, &privileges],
        )
        .map_err(|e| store_error(location, "check the role's privileges", e))?;
    let mut missing = Vec::new();
    for row in rows {
        let table: String = row.try_get(0).map_err(|e| store_error(location, "check the role's privileges", e))?;
        let privilege: String = row.try_get(1).map_err(|e| store_error(location, "check the role's privileges", e))?;
        missing.push((table, privilege));
    }
    if missing.is_empty() {
        return Ok(());
    }
    let (role, _) = role_and_schema(client);
    let list: Vec<String> = missing.iter().map(|(t, p)| format!("{p} on {t}")).collect();
    let grants: Vec<String> = missing.iter().map(|(t, p)| format!("GRANT {p} ON {t} TO {role};")).collect();
    Err(backend(
        location,
        "check the role's privileges",
        PgError::Privilege(format!("role {role} lacks {}: {}", list.join(", "), grants.join(" "))),
    ))
}

/// Brings the schema up to [`SCHEMA_VERSION`] in one transaction; `Some(found)` if it is newer.
fn migrate(client: &mut Client) -> Result<Option<u64>, (&'static str, postgres::Error)> {
    let mut tx = client.transaction().map_err(|e| ("begin the schema migration", e))?;
    let found = found_version(&mut tx).map_err(|e| ("read the schema version", e))?.unwrap_or(0);
    if found > SCHEMA_VERSION {
        return Ok(Some(found));
    }
    for sql in MIGRATIONS.iter().skip(found as usize) {
        tx.batch_execute(sql).map_err(|e| ("migrate the schema", e))?;
    }
    tx.execute(
        "INSERT INTO ctxlog_meta (key, value) VALUES ('schema_version', $1)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        &[&(SCHEMA_VERSION as i64)],
    )
    .map_err(|e| ("record the schema version", e))?;
    tx.commit().map_err(|e| ("commit the schema migration", e))?;
    Ok(None)
}

/// Test hook: sets the recorded schema version (to simulate a newer or older ctxlog).
#[cfg(feature = "test-support")]
pub fn set_schema_version(client: &mut Client, version: i64) -> Result<(), postgres::Error> {
    client.execute("UPDATE ctxlog_meta SET value = $1 WHERE key = 'schema_version'", &[&version]).map(|_| ())
}
