//! `verify` re-checks every served request: it re-renders the view each `RequestServed` claims
//! to have sent and compares the digest, the token count, the message count and whether the
//! prefix was reused. Each test records a real session, then rewrites fields of one recorded
//! `RequestServed` (decoded, changed, re-encoded and re-sealed through the codec, so the log is
//! well-formed and only lies) and expects one problem per lying field, naming its version.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

use ctxlog::codec;
use ctxlog::event::{Event, RequestServed};
use ctxlog::replay::{self, VerifyReport};
use ctxlog::store::{ExpectedVersion, Record, Version};
use ctxlog::{MemoryStore, Store, StreamId, WireFormat};
use ctxlog_tests::engine_fixtures::{config, Harness};

/// A recorded session: calls that served pure appends (`prefix_reused` true), calls whose
/// ladder edited the history (`prefix_reused` false), and call 0.
fn recorded() -> Harness {
    let mut h = Harness::new(WireFormat::Anthropic, config(3_000, 0.85, 0.5));
    let w = h.wire;
    h.append(vec![w.system("You are a careful assistant."), w.user("Read the files and explain them.")]);
    for i in 0..10 {
        let id = format!("t{i}");
        h.append(vec![w.calls("let me look", &[&id], "read_file"), w.result(&id, &"output line\n".repeat(160))]);
        h.append(vec![w.assistant("done"), w.user("next file please")]);
        h.call();
    }
    let served = h.calls.iter().map(|c| (c.call, c.prefix_reused, !c.edits().is_empty())).collect::<Vec<_>>();
    assert!(served.iter().any(|&(call, reused, _)| call > 0 && reused), "no pure-append call: {served:?}");
    assert!(served.iter().any(|&(call, reused, edited)| call > 0 && !reused && edited), "no edit: {served:?}");
    h.assert_verified();
    h
}

/// `(version, event)` of every `RequestServed` of the session.
fn served(h: &Harness) -> Vec<(Version, RequestServed)> {
    let mut out = Vec::new();
    replay::for_each_event(h.store.as_ref(), h.session.id(), 1, None, |v, ev| {
        if let Event::RequestServed(s) = ev {
            out.push((v, s));
        }
        Ok(())
    })
    .unwrap();
    out
}

/// A copy of the session's log in a fresh store, with the `RequestServed` at `version`
/// rewritten by `lie` (re-encoded and re-sealed: only its meaning is wrong).
fn with_rewritten_served(h: &Harness, version: Version, lie: impl FnOnce(&mut RequestServed)) -> MemoryStore {
    let id = h.session.id();
    let mut lie = Some(lie);
    let mut records: Vec<Record> = Vec::new();
    replay::for_each_event(h.store.as_ref(), id, 1, None, |v, mut ev| {
        if v == version {
            let Event::RequestServed(s) = &mut ev else { panic!("version {v} is a {}", ev.name()) };
            (lie.take().unwrap())(s);
        }
        records.push(codec::encode(&ev).unwrap());
        Ok(())
    })
    .unwrap();
    assert!(lie.is_none(), "version {version} was not in the log");
    let copy = MemoryStore::new();
    copy.append(id, ExpectedVersion::Exact(0), &records).unwrap();
    copy
}

fn verify(store: &MemoryStore, id: StreamId) -> VerifyReport {
    replay::verify(store, id).unwrap()
}

/// Exactly one problem, naming `version` and containing every one of `words`.
fn assert_one_problem(report: &VerifyReport, version: Version, words: &[&str]) {
    assert_eq!(report.problems.len(), 1, "{:#?}", report.problems);
    assert_eq!(report.problems[0].version, Some(version));
    let p = report.problems[0].to_string();
    assert!(p.contains(&format!("version {version} ")), "names the version {version}: {p}");
    for w in words {
        assert!(p.contains(w), "mentions {w:?}: {p}");
    }
}

#[test]
fn an_unaltered_copy_of_a_recorded_session_verifies() {
    // Given a recorded session copied record by record through the same rewriting path,
    let h = recorded();
    let v = served(&h)[3].0;
    let copy = with_rewritten_served(&h, v, |_| {});
    // when it is verified, then it is clean and every call was checked.
    let report = verify(&copy, h.session.id());
    assert!(report.ok(), "{:?}", report.problems);
    assert_eq!(report.calls, h.calls.len() as u64);
}

#[test]
fn a_wrong_view_digest_is_one_problem_naming_the_version() {
    let h = recorded();
    for (v, s) in served(&h) {
        // Given a RequestServed whose digest is not the digest of the view it served,
        let wrong = format!("{:064x}", 0xbad_u64 + s.call);
        let copy = with_rewritten_served(&h, v, |s| s.digest.clone_from(&wrong));
        // when verified, then the digest is the one problem, with both values.
        let report = verify(&copy, h.session.id());
        assert_one_problem(&report, v, &["view digest", &s.digest, &wrong, &format!("(call {})", s.call)]);
    }
}

#[test]
fn a_request_rebuilt_from_a_view_that_no_longer_matches_its_digest_is_an_error() {
    let h = recorded();
    let id = h.session.id();
    let opts = ctxlog::RequestOptions::new();
    for (v, s) in served(&h) {
        // Given a log whose RequestServed records a digest the view it served does not hash to,
        let wrong = format!("{:064x}", 0xbad_u64 + s.call);
        let copy = with_rewritten_served(&h, v, |s| s.digest.clone_from(&wrong));
        // when the request of that call is rebuilt (`ctxlog request`, a fork summary's prefix),
        // then it is refused with both digests, never served as if it were what was sent,
        match replay::served_request(&copy, id, s.call, &opts) {
            Err(ctxlog::SessionError::ViewMismatch { stream, call, recorded, rebuilt }) => {
                assert_eq!((stream, call), (id, s.call));
                assert_eq!((recorded, rebuilt), (wrong, s.digest.clone()));
            }
            other => panic!("call {}: expected ViewMismatch, got {:?}", s.call, other.map(|r| r.body().len())),
        }
        // while the untouched log rebuilds it.
        assert!(replay::served_request(h.store.as_ref(), id, s.call, &opts).is_ok());
    }
}

#[test]
fn a_wrong_view_token_count_is_one_problem_naming_the_version() {
    let h = recorded();
    for (v, s) in served(&h) {
        for wrong in [s.view_tokens + 1, s.view_tokens - 1, 0] {
            let copy = with_rewritten_served(&h, v, |s| s.view_tokens = wrong);
            let report = verify(&copy, h.session.id());
            assert_one_problem(&report, v, &["view tokens", &format!("recorded {wrong}"), &s.view_tokens.to_string()]);
        }
    }
}

#[test]
fn a_wrong_view_message_count_is_one_problem_naming_the_version() {
    let h = recorded();
    for (v, s) in served(&h) {
        for wrong in [s.view_messages + 1, s.view_messages - 1] {
            let copy = with_rewritten_served(&h, v, |s| s.view_messages = wrong);
            let report = verify(&copy, h.session.id());
            let (recorded, rendered) = (format!("recorded {wrong}"), format!("re-rendered {}", s.view_messages));
            assert_one_problem(&report, v, &["view messages", &recorded, &rendered]);
        }
    }
}

#[test]
fn a_flipped_prefix_reused_is_one_problem_naming_the_version() {
    let h = recorded();
    let all = served(&h);
    // Every call, including call 0 (nothing served before it: no prefix can have been reused)
    // and both directions (a reuse denied, a rewritten history claimed as reused).
    assert!(all.iter().any(|(_, s)| s.prefix_reused) && all.iter().any(|(_, s)| s.call > 0 && !s.prefix_reused));
    for (v, s) in all {
        let copy = with_rewritten_served(&h, v, |s| s.prefix_reused = !s.prefix_reused);
        let report = verify(&copy, h.session.id());
        let claim = format!("prefix_reused recorded {}", !s.prefix_reused);
        assert_one_problem(&report, v, &[&claim, &format!("say {}", s.prefix_reused)]);
    }
}

#[test]
fn a_record_lying_about_every_field_gets_one_problem_per_field() {
    // Given one RequestServed lying about its digest, tokens, messages and prefix reuse,
    let h = recorded();
    let (v, s) = served(&h).swap_remove(4);
    let copy = with_rewritten_served(&h, v, |s| {
        s.digest = "0".repeat(64);
        s.view_tokens += 7;
        s.view_messages += 1;
        s.prefix_reused = !s.prefix_reused;
    });
    // when verified, then each field is its own problem, each naming the version and the call,
    let report = verify(&copy, h.session.id());
    assert_eq!(report.problems.len(), 4, "{:#?}", report.problems);
    for (p, field) in report.problems.iter().map(ToString::to_string).zip([
        "view digest",
        "view tokens",
        "view messages",
        "prefix_reused",
    ]) {
        assert!(p.contains(&format!("version {v} (call {})", s.call)) && p.contains(field), "{field}: {p}");
    }
    // and the calls around it are still checked and found clean.
    assert_eq!(report.calls, h.calls.len() as u64);
}

// ---- Snapshots, blobs and counts ---------------------------------------------------------------

/// The recorded session with a snapshot at its head, copied into a fresh store.
fn with_snapshot(h: &Harness, snap: &ctxlog::store::Snapshot) -> MemoryStore {
    let copy = with_rewritten_served(h, served(h)[0].0, |_| {});
    copy.put_snapshot(h.session.id(), snap).unwrap();
    copy
}

#[test]
fn a_snapshot_of_another_builds_layout_is_a_note_not_a_problem() {
    // Given a well-sealed snapshot whose layout number this build does not read,
    let h = recorded();
    let head = h.session.state().version();
    let mut body = (ctxlog::session::SNAPSHOT_LAYOUT + 1).to_le_bytes().to_vec();
    body.extend_from_slice(b"a future build's state");
    let copy = with_snapshot(&h, &ctxlog::store::Snapshot::seal(head, body));
    // when verified, then it is a stale cache (opening the session replays), not damage.
    let report = verify(&copy, h.session.id());
    assert!(report.ok() && report.snapshot_checked, "{:?}", report.problems);
    assert_eq!(report.notes.len(), 1, "{:?}", report.notes);
    assert!(report.notes[0].contains(&format!("snapshot at version {head} ignored")), "{}", report.notes[0]);
}

#[test]
fn a_well_sealed_snapshot_of_this_layout_that_does_not_decode_is_a_problem() {
    // Given a sealed snapshot of this build's layout whose state bytes are garbage,
    let h = recorded();
    let head = h.session.state().version();
    let mut body = ctxlog::session::SNAPSHOT_LAYOUT.to_le_bytes().to_vec();
    body.extend_from_slice(&[0xff; 40]);
    let copy = with_snapshot(&h, &ctxlog::store::Snapshot::seal(head, body));
    // when verified, then it is reported as unusable (the seal held, so this is damage a writer
    // made, not another build's cache), and no note excuses it.
    let report = verify(&copy, h.session.id());
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert!(
        matches!(
            &report.problems[0].kind,
            replay::ProblemKind::SnapshotUnusable { error: ctxlog::session::SnapshotError::Payload(_) }
        ),
        "{:?}",
        report.problems
    );
    assert!(
        report.problems[0].to_string().contains(&format!("snapshot at version {head} is unusable")),
        "{:?}",
        report.problems
    );
    assert!(report.notes.is_empty(), "{:?}", report.notes);
}

#[test]
fn a_snapshot_past_the_readable_log_is_reported_with_the_damage_before_it() {
    // Given a good snapshot at the head and a flipped bit in a record before it,
    let h = recorded();
    let head = h.session.state().version();
    let snap = ctxlog::session::encode_snapshot(h.session.state()).unwrap();
    let copy = with_snapshot(&h, &snap);
    assert!(verify(&copy, h.session.id()).ok());
    assert!(copy.tamper(h.session.id(), 5, |b| b[3] ^= 0x20));
    // when verified, then both the damaged record and the snapshot nothing can vouch for are
    // problems, each naming its version.
    let report = verify(&copy, h.session.id());
    assert_eq!(report.problems.len(), 2, "{:?}", report.problems);
    assert!(report.problems[0].to_string().contains("version 5"), "{}", report.problems[0]);
    assert_eq!(report.problems[0].version, Some(5));
    assert!(
        report.problems[1].to_string().contains(&format!("snapshot at version {head} is beyond the log")),
        "{:?}",
        report.problems
    );
}

/// Forwards to a [`MemoryStore`] but has lost one blob.
struct LostBlob {
    inner: MemoryStore,
    lost: ctxlog::store::BlobId,
}

impl Store for LostBlob {
    fn append(&self, s: StreamId, e: ExpectedVersion, r: &[Record]) -> Result<Version, ctxlog::StoreError> {
        self.inner.append(s, e, r)
    }
    fn read(
        &self,
        s: StreamId,
        from: Version,
        max: usize,
    ) -> Result<Vec<ctxlog::store::StoredRecord>, ctxlog::StoreError> {
        self.inner.read(s, from, max)
    }
    fn head(&self, s: StreamId) -> Result<Option<Version>, ctxlog::StoreError> {
        self.inner.head(s)
    }
    fn streams(&self) -> Result<Vec<StreamId>, ctxlog::StoreError> {
        self.inner.streams()
    }
    fn put_snapshot(&self, s: StreamId, snap: &ctxlog::store::Snapshot) -> Result<(), ctxlog::StoreError> {
        self.inner.put_snapshot(s, snap)
    }
    fn get_snapshot(&self, s: StreamId) -> Result<Option<ctxlog::store::Snapshot>, ctxlog::StoreError> {
        self.inner.get_snapshot(s)
    }
    fn put_blob(&self, bytes: &[u8]) -> Result<ctxlog::store::BlobId, ctxlog::StoreError> {
        self.inner.put_blob(bytes)
    }
    fn get_blob(&self, id: &ctxlog::store::BlobId) -> Result<Option<Vec<u8>>, ctxlog::StoreError> {
        if *id == self.lost {
            return Ok(None);
        }
        self.inner.get_blob(id)
    }
}

#[test]
fn every_referenced_blob_is_checked_including_images_inside_tool_results() {
    // Given a session with a screenshot in a human message and another inside a tool result,
    let mut h = Harness::new(WireFormat::Anthropic, config(100_000, 0.85, 0.5));
    let w = h.wire;
    let png = |w: u32, h: u32| ctxlog_tests::scenario::b64(&ctxlog_tests::scenario::png(w, h));
    let image = |data: String| serde_json::json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}});
    let user = ctxlog_tests::engine_fixtures::msg(serde_json::json!({"role": "user", "content": [
        {"type": "text", "text": "what is on screen?"}, image(png(3, 2))]}));
    let result = ctxlog_tests::engine_fixtures::msg(serde_json::json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "shot", "content": [{"type": "text", "text": "taken"}, image(png(5, 4))]}]}));
    h.append(vec![w.system("sys"), user, w.calls("", &["shot"], "screenshot"), result]);
    h.call();
    let (outer, inner) = (
        ctxlog::store::BlobId::of(&ctxlog_tests::scenario::png(3, 2)),
        ctxlog::store::BlobId::of(&ctxlog_tests::scenario::png(5, 4)),
    );
    // When verified with every blob present, then both were checked and the counts are the log's.
    let report = replay::verify(h.store.as_ref(), h.session.id()).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    assert_eq!((report.blobs, report.calls), (2, 1));
    assert_eq!(report.events, h.session.state().version());
    // When either blob is lost, then verify names it.
    for lost in [outer.clone(), inner.clone()] {
        let copy = LostBlob { inner: with_rewritten_served(&h, served(&h)[0].0, |_| {}), lost: lost.clone() };
        for id in [&outer, &inner] {
            if let Some(bytes) = h.store.get_blob(id).unwrap() {
                copy.inner.put_blob(&bytes).unwrap();
            }
        }
        let report = replay::verify(&copy, h.session.id()).unwrap();
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        assert!(
            report.problems[0].to_string().contains(&format!("blob {lost} is referenced but missing")),
            "{:?}",
            report.problems
        );
    }
}
