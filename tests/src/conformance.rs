//! The `Store` conformance suite: one generic body per rule of the contract
//! (`core/src/store.rs`, DESIGN.md §10), run on every backend by the `store_tests!` macro in
//! `tests/conformance.rs` (ripgrep `rgtest!` style). A backend takes part by providing a
//! factory (`fn() -> F`) that builds a fresh, empty [`Fixture`]; a backend whose blobs can be
//! damaged from outside also implements [`TamperBlobs`] and runs the blob-tamper test.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;

use ctxlog::store::{BlobId, ExpectedVersion, Record, Snapshot, Store, StoreError, StreamId, Version};

/// A store under test plus the handle needed to reopen and damage it.
pub trait Fixture {
    /// The store under test.
    fn store(&self) -> &dyn Store;
    /// Drops the store and opens it again from its files (no-op for in-memory stores).
    fn reopen(&mut self);
    /// Flips one bit of the stored bytes of `version` in `stream`, behind the store's back
    /// (panics if there is no such record: a broken test, not a skipped one).
    fn flip_record_bit(&mut self, stream: StreamId, version: Version);
}

/// A backend whose blobs sit where something other than the store can damage them.
pub trait TamperBlobs: Fixture {
    /// Flips one bit of a stored blob (panics if there is no such blob).
    fn flip_blob_bit(&mut self, id: &BlobId);
}

/// A record whose body names its stream-independent identity, for easy checking.
pub fn rec(text: &str) -> Record {
    Record::seal(text.as_bytes().to_vec())
}

fn bodies(store: &dyn Store, stream: StreamId) -> Vec<String> {
    store
        .read(stream, 1, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|r| String::from_utf8(r.record.body().to_vec()).unwrap())
        .collect()
}

fn versions(store: &dyn Store, stream: StreamId, from: Version, max: usize) -> Vec<Version> {
    store.read(stream, from, max).unwrap().into_iter().map(|r| r.version).collect()
}

/// Appends return the new head; reads return the records in order with their versions.
pub fn append_and_read<F: Fixture>(make: fn() -> F) {
    let f = make();
    let s = StreamId::random();
    let st = f.store();
    assert_eq!(st.append(s, ExpectedVersion::Exact(0), &[rec("a"), rec("b"), rec("c")]).unwrap(), 3);
    assert_eq!(st.append(s, ExpectedVersion::Exact(3), &[rec("d")]).unwrap(), 4);
    assert_eq!(st.append(s, ExpectedVersion::Any, &[rec("e")]).unwrap(), 5);
    assert_eq!(bodies(st, s), ["a", "b", "c", "d", "e"]);
    let all = st.read(s, 1, usize::MAX).unwrap();
    assert_eq!(all.iter().map(|r| r.version).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
    assert_eq!(all[0].record, rec("a"), "sealed bytes round-trip unchanged");
}

/// `append_unsynced` is an append in every rule but when it syncs: versions, conflicts (which
/// write nothing), atomic batches, reads, and a reopen keeps it; synced and unsynced appends
/// interleave on one stream and across streams.
pub fn unsynced_appends_are_appends<F: Fixture>(make: fn() -> F) {
    let mut f = make();
    let (s, t) = (StreamId::random(), StreamId::random());
    let st = f.store();
    assert_eq!(st.append_unsynced(s, ExpectedVersion::Exact(0), &[rec("a"), rec("b")]).unwrap(), 2);
    assert_eq!(st.append(s, ExpectedVersion::Exact(2), &[rec("c")]).unwrap(), 3);
    assert_eq!(st.append_unsynced(t, ExpectedVersion::Any, &[rec("x")]).unwrap(), 1);
    assert_eq!(st.append_unsynced(s, ExpectedVersion::Any, &[rec("d")]).unwrap(), 4);
    let stale = st.append_unsynced(s, ExpectedVersion::Exact(2), &[rec("no"), rec("no")]);
    assert!(matches!(stale, Err(StoreError::Conflict { .. })), "a stale head conflicts: {stale:?}");
    assert_eq!(st.append(t, ExpectedVersion::Exact(1), &[rec("y")]).unwrap(), 2);
    f.reopen();
    let st = f.store();
    assert_eq!(bodies(st, s), ["a", "b", "c", "d"]);
    assert_eq!(bodies(st, t), ["x", "y"]);
    assert_eq!(st.append_unsynced(s, ExpectedVersion::Exact(4), &[rec("e")]).unwrap(), 5);
    f.reopen();
    assert_eq!(bodies(f.store(), s), ["a", "b", "c", "d", "e"], "an unsynced append survives a clean reopen");
}

/// `read(from, max)` honours both bounds.
pub fn read_bounds<F: Fixture>(make: fn() -> F) {
    let f = make();
    let s = StreamId::random();
    let st = f.store();
    for i in 0..10 {
        st.append(s, ExpectedVersion::Exact(i), &[rec(&format!("r{i}"))]).unwrap();
    }
    assert_eq!(versions(st, s, 3, 2), [3, 4]);
    assert_eq!(versions(st, s, 9, 100), [9, 10]);
    assert_eq!(versions(st, s, 0, 2), [1, 2], "from 0 reads from the first record");
    assert!(versions(st, s, 11, 10).is_empty(), "from past the head");
    assert!(versions(st, s, 1, 0).is_empty(), "max 0");
    assert!(versions(st, StreamId::random(), 1, 10).is_empty(), "unknown stream");
    assert_eq!(versions(st, s, 1, usize::MAX).len(), 10);
}

/// `head` is `None` until a stream has records; `streams` lists only streams with records,
/// sorted.
pub fn head_and_streams<F: Fixture>(make: fn() -> F) {
    let f = make();
    let st = f.store();
    assert!(st.streams().unwrap().is_empty());
    let (a, b) = (StreamId::random(), StreamId::random());
    assert_eq!(st.head(a).unwrap(), None);
    assert_eq!(st.append(a, ExpectedVersion::Exact(0), &[]).unwrap(), 0, "empty append on a new stream");
    assert_eq!(st.head(a).unwrap(), None, "an empty append creates nothing");
    assert!(st.streams().unwrap().is_empty());
    st.append(b, ExpectedVersion::Any, &[rec("x"), rec("y")]).unwrap();
    st.append(a, ExpectedVersion::Any, &[rec("z")]).unwrap();
    assert_eq!(st.head(a).unwrap(), Some(1));
    assert_eq!(st.head(b).unwrap(), Some(2));
    let mut want = vec![a, b];
    want.sort();
    assert_eq!(st.streams().unwrap(), want);
    assert_eq!(st.append(b, ExpectedVersion::Exact(2), &[]).unwrap(), 2, "empty append returns the head");
}

/// A wrong expected head is a `Conflict` carrying both versions, and nothing is written.
pub fn conflict_writes_nothing<F: Fixture>(make: fn() -> F) {
    let f = make();
    let s = StreamId::random();
    let st = f.store();
    st.append(s, ExpectedVersion::Exact(0), &[rec("a"), rec("b")]).unwrap();
    for wrong in [1, 3, 100] {
        let e = st.append(s, ExpectedVersion::Exact(wrong), &[rec("x")]).unwrap_err();
        match e {
            StoreError::Conflict { stream, expected, actual } => {
                assert_eq!((stream, expected, actual), (s, ExpectedVersion::Exact(wrong), 2));
            }
            other => panic!("expected Conflict, got {other}"),
        }
    }
    assert_eq!(st.head(s).unwrap(), Some(2));
    assert_eq!(bodies(st, s), ["a", "b"]);
    // A conflicting empty append is still a conflict: the check does not depend on the batch.
    assert!(matches!(st.append(s, ExpectedVersion::Exact(5), &[]), Err(StoreError::Conflict { .. })));
    // Conflict on an unknown stream (expected > 0) creates nothing either.
    let t = StreamId::random();
    assert!(matches!(
        st.append(t, ExpectedVersion::Exact(1), &[rec("x")]),
        Err(StoreError::Conflict { actual: 0, .. })
    ));
    assert_eq!(st.head(t).unwrap(), None);
    assert_eq!(st.streams().unwrap(), [s]);
}

/// `Exact(0)` means "the stream must not exist yet".
pub fn exact_zero_on_existing_stream_conflicts<F: Fixture>(make: fn() -> F) {
    let f = make();
    let s = StreamId::random();
    let st = f.store();
    st.append(s, ExpectedVersion::Exact(0), &[rec("a")]).unwrap();
    assert!(matches!(
        st.append(s, ExpectedVersion::Exact(0), &[rec("b")]),
        Err(StoreError::Conflict { expected: ExpectedVersion::Exact(0), actual: 1, .. })
    ));
    assert_eq!(bodies(st, s), ["a"]);
}

/// A writer read the head, another writer appended, and the first appends with its stale
/// `Exact(h)`: `Conflict { expected: Exact(h), actual }`, whatever the batch size and however
/// far behind, and the store is exactly what the winner left (records, head, other streams,
/// snapshot), before and after a reopen. Retrying at the fresh head is accepted.
pub fn stale_exact_append_conflicts_and_changes_nothing<F: Fixture>(make: fn() -> F) {
    let mut f = make();
    let (s, other) = (StreamId::random(), StreamId::random());
    f.store().append(s, ExpectedVersion::Exact(0), &[rec("a"), rec("b")]).unwrap();
    f.store().append(other, ExpectedVersion::Exact(0), &[rec("o")]).unwrap();
    let snap = Snapshot::seal(2, b"state at 2".to_vec());
    f.store().put_snapshot(s, &snap).unwrap();
    // Writer A reads the head; writer B appends first, a record and then a batch.
    let seen = f.store().head(s).unwrap().unwrap();
    f.store().append(s, ExpectedVersion::Exact(seen), &[rec("B1")]).unwrap();
    f.store().append(s, ExpectedVersion::Exact(seen + 1), &[rec("B2"), rec("B3")]).unwrap();
    let head = seen + 3;
    let winner_left = f.store().read(s, 1, usize::MAX).unwrap();
    let mut streams = vec![s, other];
    streams.sort();
    let unchanged = |st: &dyn Store, when: &str| {
        assert_eq!(st.read(s, 1, usize::MAX).unwrap(), winner_left, "{when}: records");
        assert_eq!(st.head(s).unwrap(), Some(head), "{when}: head");
        assert_eq!(bodies(st, other), ["o"], "{when}: the other stream");
        assert_eq!(st.streams().unwrap(), streams, "{when}: streams");
        assert_eq!(st.get_snapshot(s).unwrap().as_ref(), Some(&snap), "{when}: snapshot");
    };
    for stale in [seen, seen + 1, seen + 2] {
        for batch in [vec![rec("A")], vec![rec("A1"), rec("A2"), rec("A3")], vec![]] {
            match f.store().append(s, ExpectedVersion::Exact(stale), &batch) {
                Err(StoreError::Conflict { stream, expected, actual }) => {
                    assert_eq!((stream, expected, actual), (s, ExpectedVersion::Exact(stale), head));
                }
                other => panic!("stale Exact({stale}) with {} records: expected Conflict, got {other:?}", batch.len()),
            }
        }
        unchanged(f.store(), &format!("after the stale Exact({stale})"));
    }
    f.reopen();
    unchanged(f.store(), "after reopen");
    // Writer A reads the head again and retries: accepted right after the winner's records.
    let fresh = f.store().head(s).unwrap().unwrap();
    assert_eq!(f.store().append(s, ExpectedVersion::Exact(fresh), &[rec("A")]).unwrap(), head + 1);
    assert_eq!(bodies(f.store(), s), ["a", "b", "B1", "B2", "B3", "A"]);
}

/// Writers racing in lockstep on one stream: each round every writer reads the same head, then
/// all append at it at once. Exactly one wins the round (at `head + 1`) and every other gets
/// `Conflict { actual: head + 1 }`: a store that let a stale `Exact` through would acknowledge
/// two appends in one round. Returns how many rounds each writer won.
pub fn race_in_lockstep(writers: &[&dyn Store], s: StreamId, rounds: u64) -> Vec<u64> {
    let barrier = Barrier::new(writers.len());
    type Outcome = (Version, Result<Version, StoreError>);
    let outcomes: Vec<Vec<Outcome>> = std::thread::scope(|scope| {
        let handles: Vec<_> = writers
            .iter()
            .enumerate()
            .map(|(w, st)| {
                let barrier = &barrier;
                scope.spawn(move || {
                    (0..rounds)
                        .map(|round| {
                            barrier.wait(); // the previous round is over
                            let head = st.head(s).unwrap().unwrap_or(0);
                            barrier.wait(); // everyone has read the same head
                            (head, st.append(s, ExpectedVersion::Exact(head), &[rec(&format!("w{w} r{round}"))]))
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut won = vec![0; writers.len()];
    for round in 0..rounds {
        let mut winners = Vec::new();
        for (w, outcome) in outcomes.iter().enumerate() {
            match &outcome[round as usize] {
                (head, _) if *head != round => panic!("round {round}: writer {w} read head {head}"),
                (_, Ok(v)) => {
                    assert_eq!(*v, round + 1, "round {round}: writer {w}");
                    winners.push(w);
                }
                (_, Err(StoreError::Conflict { expected, actual, .. })) => {
                    assert_eq!((*expected, *actual), (ExpectedVersion::Exact(round), round + 1), "round {round}");
                }
                (_, Err(e)) => panic!("round {round}: writer {w}: {e}"),
            }
        }
        let [w] = winners[..] else { panic!("round {round}: {} writers acknowledged at one head", winners.len()) };
        won[w] += 1;
        let body = writers[0].read(s, round + 1, 1).unwrap()[0].record.body().to_vec();
        assert_eq!(body, format!("w{w} r{round}").as_bytes(), "version {} holds the winner's record", round + 1);
    }
    assert_eq!(writers[0].head(s).unwrap(), Some(rounds));
    won
}

/// Four threads on one store in lockstep: one winner and three `Conflict`s every round.
pub fn concurrent_writers_in_lockstep<F: Fixture>(make: fn() -> F) {
    let f = make();
    let st = f.store();
    let won = race_in_lockstep(&[st, st, st, st], StreamId::random(), 25);
    assert_eq!(won.iter().sum::<u64>(), 25);
}

/// A batch is all-or-nothing and gets consecutive versions.
pub fn batch_is_atomic<F: Fixture>(make: fn() -> F) {
    let f = make();
    let s = StreamId::random();
    let st = f.store();
    st.append(s, ExpectedVersion::Exact(0), &[rec("a")]).unwrap();
    let batch: Vec<Record> = (0..50).map(|i| rec(&format!("b{i}"))).collect();
    assert!(st.append(s, ExpectedVersion::Exact(0), &batch).is_err());
    assert_eq!(st.head(s).unwrap(), Some(1), "a conflicting batch writes none of its records");
    assert_eq!(st.append(s, ExpectedVersion::Exact(1), &batch).unwrap(), 51);
    let got = st.read(s, 2, usize::MAX).unwrap();
    assert_eq!(got.len(), 50);
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r.version, 2 + i as u64);
        assert_eq!(r.record.body(), format!("b{i}").as_bytes());
    }
}

fn assert_corrupt(res: Result<impl std::fmt::Debug, StoreError>, stream: StreamId, version: Version) {
    match res {
        Err(e @ StoreError::Corrupt { .. }) => {
            let StoreError::Corrupt { stream: s, version: v, .. } = &e else { unreachable!() };
            assert_eq!((*s, *v), (stream, version), "{e}");
            let text = e.to_string();
            assert!(text.contains(&stream.to_string()) && text.contains(&format!("version {version}")), "{text}");
        }
        other => panic!("expected Corrupt at {stream} v{version}, got {other:?}"),
    }
}

/// One flipped bit in a stored record is a `Corrupt` naming stream and version, found on
/// read; the records around it stay readable.
pub fn flipped_bit_is_corrupt<F: Fixture>(make: fn() -> F) {
    let mut f = make();
    let s = StreamId::random();
    for i in 0..4 {
        f.store().append(s, ExpectedVersion::Exact(i), &[rec(&format!("single {i}"))]).unwrap();
    }
    f.store().append(s, ExpectedVersion::Exact(4), &[rec("batch 0"), rec("batch 1"), rec("batch 2")]).unwrap();
    f.flip_record_bit(s, 2);
    assert_corrupt(f.store().read(s, 1, usize::MAX), s, 2);
    assert_corrupt(f.store().read(s, 2, 1), s, 2);
    assert_eq!(versions(f.store(), s, 1, 1), [1], "records before the damage stay readable");
    assert_eq!(versions(f.store(), s, 3, usize::MAX), [3, 4, 5, 6, 7], "records after it too");
    // Inside a multi-record batch the error names the damaged record, not the batch start.
    f.flip_record_bit(s, 6);
    assert_corrupt(f.store().read(s, 3, usize::MAX), s, 6);
}

/// Blobs are content-addressed and idempotent.
pub fn blobs<F: Fixture>(make: fn() -> F) {
    let f = make();
    let st = f.store();
    let id = st.put_blob(b"an image").unwrap();
    assert_eq!(id, BlobId::of(b"an image"));
    assert_eq!(st.put_blob(b"an image").unwrap(), id, "same bytes, same id");
    assert_eq!(st.get_blob(&id).unwrap().as_deref(), Some(&b"an image"[..]));
    assert_eq!(st.get_blob(&BlobId::of(b"never stored")).unwrap(), None);
    let empty = st.put_blob(b"").unwrap();
    assert_eq!(st.get_blob(&empty).unwrap().as_deref(), Some(&b""[..]));
    let other = st.put_blob(b"another").unwrap();
    assert_ne!(other, id);
}

/// A flipped bit in a stored blob is a `CorruptBlob` naming it, found on read; other blobs
/// stay readable.
pub fn flipped_blob_bit_is_corrupt<F: TamperBlobs>(make: fn() -> F) {
    let mut f = make();
    let id = f.store().put_blob(b"an image").unwrap();
    let other = f.store().put_blob(b"another").unwrap();
    f.flip_blob_bit(&id);
    match f.store().get_blob(&id) {
        Err(StoreError::CorruptBlob { id: bad, .. }) => assert_eq!(bad, id),
        other => panic!("expected CorruptBlob, got {other:?}"),
    }
    assert_eq!(f.store().get_blob(&other).unwrap().as_deref(), Some(&b"another"[..]));
}

/// Snapshots: never ahead of the log, never replaced by an older one, returned unverified.
pub fn snapshots<F: Fixture>(make: fn() -> F) {
    let f = make();
    let st = f.store();
    let s = StreamId::random();
    assert_eq!(st.get_snapshot(s).unwrap(), None);
    assert!(matches!(
        st.put_snapshot(s, &Snapshot::seal(1, b"s1".to_vec())),
        Err(StoreError::SnapshotAhead { snapshot: 1, head: 0, .. })
    ));
    st.append(s, ExpectedVersion::Exact(0), &[rec("a"), rec("b"), rec("c")]).unwrap();
    assert!(matches!(
        st.put_snapshot(s, &Snapshot::seal(4, b"s4".to_vec())),
        Err(StoreError::SnapshotAhead { snapshot: 4, head: 3, .. })
    ));
    assert_eq!(st.get_snapshot(s).unwrap(), None, "a rejected snapshot is not stored");
    let s2 = Snapshot::seal(2, b"state at 2".to_vec());
    st.put_snapshot(s, &s2).unwrap();
    assert_eq!(st.get_snapshot(s).unwrap().as_ref(), Some(&s2));
    st.put_snapshot(s, &Snapshot::seal(1, b"older".to_vec())).unwrap();
    assert_eq!(st.get_snapshot(s).unwrap().as_ref(), Some(&s2), "an older snapshot does not replace a newer one");
    let s3 = Snapshot::seal(3, vec![7u8; 200_000]);
    st.put_snapshot(s, &s3).unwrap();
    assert_eq!(st.get_snapshot(s).unwrap().as_ref(), Some(&s3));
    // A smaller snapshot after a larger one (chunked backends must not keep stale tails).
    let s3b = Snapshot::seal(3, b"small again".to_vec());
    st.put_snapshot(s, &s3b).unwrap();
    assert_eq!(st.get_snapshot(s).unwrap().as_ref(), Some(&s3b), "same version replaces");
    // The store does not judge the bytes: the session verifies the seal and falls back.
    let broken = Snapshot { version: 3, bytes: b"not sealed at all".to_vec() };
    st.put_snapshot(s, &broken).unwrap();
    assert_eq!(st.get_snapshot(s).unwrap().as_ref(), Some(&broken));
    assert!(st.get_snapshot(s).unwrap().unwrap().body().is_err());
    assert_eq!(st.get_snapshot(StreamId::random()).unwrap(), None);
}

/// Everything survives dropping and reopening the store, and appends continue at the head.
pub fn reopen_keeps_everything<F: Fixture>(make: fn() -> F) {
    let mut f = make();
    let (a, b) = (StreamId::random(), StreamId::random());
    f.store().append(a, ExpectedVersion::Exact(0), &[rec("a1"), rec("a2")]).unwrap();
    f.store().append(b, ExpectedVersion::Exact(0), &[rec("b1")]).unwrap();
    f.store().append(a, ExpectedVersion::Exact(2), &[rec("a3")]).unwrap();
    let snap = Snapshot::seal(2, b"snap".to_vec());
    f.store().put_snapshot(a, &snap).unwrap();
    let blob = f.store().put_blob(b"blob bytes").unwrap();
    f.reopen();
    let st = f.store();
    assert_eq!(bodies(st, a), ["a1", "a2", "a3"]);
    assert_eq!(bodies(st, b), ["b1"]);
    assert_eq!(st.head(a).unwrap(), Some(3));
    let mut want = vec![a, b];
    want.sort();
    assert_eq!(st.streams().unwrap(), want);
    assert_eq!(st.get_snapshot(a).unwrap(), Some(snap));
    assert_eq!(st.get_blob(&blob).unwrap().as_deref(), Some(&b"blob bytes"[..]));
    assert!(matches!(
        st.append(a, ExpectedVersion::Exact(2), &[rec("x")]),
        Err(StoreError::Conflict { actual: 3, .. })
    ));
    assert_eq!(st.append(a, ExpectedVersion::Exact(3), &[rec("a4")]).unwrap(), 4);
    f.reopen();
    assert_eq!(bodies(f.store(), a), ["a1", "a2", "a3", "a4"]);
    f.reopen();
    assert_eq!(f.store().head(a).unwrap(), Some(4), "reopening twice changes nothing");
}

/// 100 streams, each with its own head, all listed in order.
pub fn many_streams<F: Fixture>(make: fn() -> F) {
    let mut f = make();
    let mut ids: Vec<StreamId> = (0..100).map(|_| StreamId::random()).collect();
    for (i, s) in ids.iter().enumerate() {
        let recs: Vec<Record> = (0..(i % 5 + 1)).map(|j| rec(&format!("{i}/{j}"))).collect();
        f.store().append(*s, ExpectedVersion::Exact(0), &recs).unwrap();
    }
    let check = |st: &dyn Store, ids: &[StreamId]| {
        for (i, s) in ids.iter().enumerate() {
            assert_eq!(st.head(*s).unwrap(), Some((i % 5 + 1) as u64));
            assert_eq!(bodies(st, *s).last().unwrap(), &format!("{i}/{}", i % 5));
        }
    };
    check(f.store(), &ids);
    f.reopen();
    check(f.store(), &ids);
    ids.sort();
    assert_eq!(f.store().streams().unwrap(), ids);
}

/// A 10 MiB blob, a 1 MiB record and a 1 MiB snapshot round-trip exactly.
pub fn large_values<F: Fixture>(make: fn() -> F) {
    let mut f = make();
    let mut big = vec![0u8; 10 << 20];
    let mut x: u32 = 0x9e37_79b9;
    for b in big.iter_mut() {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *b = x as u8;
    }
    let id = f.store().put_blob(&big).unwrap();
    let s = StreamId::random();
    let record = Record::seal(big[..1 << 20].to_vec());
    f.store().append(s, ExpectedVersion::Exact(0), &[rec("small"), record.clone(), rec("after")]).unwrap();
    let snap = Snapshot::seal(3, big[1..(1 << 20) + 1].to_vec());
    f.store().put_snapshot(s, &snap).unwrap();
    f.reopen();
    let st = f.store();
    assert!(st.get_blob(&id).unwrap().unwrap() == big, "10 MiB blob round-trips");
    let got = st.read(s, 1, usize::MAX).unwrap();
    assert_eq!(got.len(), 3);
    assert!(got[1].record == record, "1 MiB record round-trips");
    assert_eq!(got[2].record.body(), b"after");
    assert!(st.get_snapshot(s).unwrap().unwrap() == snap, "1 MiB snapshot round-trips");
}

/// Threads racing on one stream with `Exact` expectations: exactly one wins each version,
/// losers get `Conflict`, and the log ends dense with no duplicates.
pub fn concurrent_writers_one_stream<F: Fixture>(make: fn() -> F) {
    const THREADS: u64 = 4;
    const PER_THREAD: u64 = 25;
    let f = make();
    let st = f.store();
    let s = StreamId::random();
    let conflicts = AtomicU64::new(0);
    let won: Vec<Vec<Version>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let conflicts = &conflicts;
                scope.spawn(move || {
                    let mut mine = Vec::new();
                    while (mine.len() as u64) < PER_THREAD {
                        let head = st.head(s).unwrap().unwrap_or(0);
                        let body = format!("t{t} n{}", mine.len());
                        match st.append(s, ExpectedVersion::Exact(head), &[rec(&body)]) {
                            Ok(v) => {
                                assert_eq!(v, head + 1);
                                mine.push(v);
                            }
                            Err(StoreError::Conflict { .. }) => {
                                conflicts.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => panic!("thread {t}: {e}"),
                        }
                    }
                    mine
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let total = THREADS * PER_THREAD;
    let all: Vec<Version> = won.iter().flatten().copied().collect();
    let set: BTreeSet<Version> = all.iter().copied().collect();
    assert_eq!(all.len(), set.len(), "a version was acknowledged twice");
    assert_eq!(set, (1..=total).collect::<BTreeSet<_>>());
    assert_eq!(st.head(s).unwrap(), Some(total));
    let recs = st.read(s, 1, usize::MAX).unwrap();
    assert_eq!(recs.len() as u64, total);
    // The record at each version is the one its winner wrote.
    for (t, versions) in won.iter().enumerate() {
        for (n, v) in versions.iter().enumerate() {
            let body = recs[(*v - 1) as usize].record.body();
            assert_eq!(body, format!("t{t} n{n}").as_bytes(), "version {v}");
        }
    }
    eprintln!("{} conflicts resolved by retry", conflicts.load(Ordering::Relaxed));
}

/// Threads appending to different streams do not interfere.
pub fn concurrent_writers_many_streams<F: Fixture>(make: fn() -> F) {
    let f = make();
    let st = f.store();
    let ids: Vec<StreamId> = (0..4).map(|_| StreamId::random()).collect();
    std::thread::scope(|scope| {
        for s in &ids {
            scope.spawn(move || {
                for i in 0..30 {
                    st.append(*s, ExpectedVersion::Exact(i), &[rec(&format!("{s} {i}"))]).unwrap();
                }
            });
        }
    });
    for s in &ids {
        let b = bodies(st, *s);
        assert_eq!(b.len(), 30);
        assert_eq!(b[29], format!("{s} 29"));
    }
}

/// Outcome of a store call with the error reduced to what the contract fixes.
fn norm<T>(r: Result<T, StoreError>) -> Result<T, String> {
    r.map_err(|e| match e {
        StoreError::Conflict { expected, actual, .. } => format!("Conflict(expected {expected}, actual {actual})"),
        StoreError::SnapshotAhead { snapshot, head, .. } => format!("SnapshotAhead({snapshot} > {head})"),
        other => format!("unexpected error: {other}"),
    })
}

/// Random operations (including reopen) on the backend and on [`MemoryStore`], the
/// reference, must give the same answers (sled's `prop_tree_matches_btreemap` idea).
pub fn model_matches_memory_store<F: Fixture>(make: fn() -> F) {
    use ctxlog::store::MemoryStore;
    let mut f = make();
    let model = MemoryStore::new();
    let ids: Vec<StreamId> = (0..3).map(|_| StreamId::random()).collect();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut rnd = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n.max(1)
    };
    for step in 0..400u64 {
        let s = ids[rnd(3) as usize];
        let head = model.head(s).unwrap().unwrap_or(0);
        let st = f.store();
        match rnd(10) {
            0..=3 => {
                let expected = match rnd(4) {
                    0 => ExpectedVersion::Any,
                    1 => ExpectedVersion::Exact(head),
                    2 => ExpectedVersion::Exact(head + 1),
                    _ => ExpectedVersion::Exact(head.saturating_sub(1)),
                };
                let recs: Vec<Record> = (0..rnd(4)).map(|i| rec(&format!("step {step} rec {i}"))).collect();
                let want = norm(model.append(s, expected, &recs));
                assert_eq!(norm(st.append(s, expected, &recs)), want, "step {step}: append {expected} x{}", recs.len());
            }
            4 | 5 => {
                let (from, max) = (rnd(head + 3), rnd(6) as usize);
                let want = model.read(s, from, max).unwrap();
                assert_eq!(st.read(s, from, max).unwrap(), want, "step {step}: read({from}, {max})");
            }
            6 => {
                assert_eq!(st.head(s).unwrap(), model.head(s).unwrap(), "step {step}: head");
                assert_eq!(st.streams().unwrap(), model.streams().unwrap(), "step {step}: streams");
            }
            7 => {
                let snap = Snapshot::seal(rnd(head + 2), format!("snap {step}").into_bytes());
                let want = norm(model.put_snapshot(s, &snap));
                assert_eq!(norm(st.put_snapshot(s, &snap)), want, "step {step}: put_snapshot v{}", snap.version);
                assert_eq!(st.get_snapshot(s).unwrap(), model.get_snapshot(s).unwrap(), "step {step}: get_snapshot");
            }
            8 => {
                let bytes = format!("blob {}", rnd(20)).into_bytes();
                let id = model.put_blob(&bytes).unwrap();
                assert_eq!(st.put_blob(&bytes).unwrap(), id);
                let probe = BlobId::of(format!("blob {}", rnd(40)).as_bytes());
                assert_eq!(st.get_blob(&probe).unwrap(), model.get_blob(&probe).unwrap(), "step {step}: get_blob");
            }
            _ => {
                if rnd(3) == 0 {
                    f.reopen();
                }
            }
        }
    }
    for s in &ids {
        assert_eq!(f.store().read(*s, 1, usize::MAX).unwrap(), model.read(*s, 1, usize::MAX).unwrap());
    }
}
