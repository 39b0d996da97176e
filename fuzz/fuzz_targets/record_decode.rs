//! Record and snapshot decoding: what every backend hands to core after a read.
//!
//! Each input is tried three ways:
//! 1. as the stored bytes of a record (`Record::from_stored`): the seal is checked first, and a
//!    failure is `Corrupt` naming the stream and version it was given;
//! 2. as the body of a record whose seal holds (so the envelope and the bincode payload
//!    decoder see every input, not only the rare one with a matching crc32c): `codec::decode`
//!    returns an event or a `DecodeError` naming the stream and version, and a decoded event
//!    survives encode → decode unchanged (compared by bytes, so a NaN ratio compares equal);
//! 3. as a sealed snapshot body (first two bytes: the version it claims): `decode_snapshot`
//!    returns a state at exactly that version or a reason, and a decoded state survives
//!    encode → decode unchanged.
//!
//! Any panic, or a property that does not hold, is a crash.

#![no_main]

use ctxlog::codec;
use ctxlog::session::{decode_snapshot, encode_snapshot};
use ctxlog::store::{Record, Snapshot, StoreError, StreamId};
use libfuzzer_sys::fuzz_target;

const STREAM: &str = "00000000-0000-0000-0000-00000000601d";
const VERSION: u64 = 42;

fuzz_target!(|data: &[u8]| {
    let Ok(stream) = STREAM.parse::<StreamId>() else { return };
    stored(stream, data);
    sealed(stream, data);
    snapshot(data);
});

fn stored(stream: StreamId, data: &[u8]) {
    match Record::from_stored(stream, VERSION, data.to_vec()) {
        Ok(record) => {
            assert_eq!(record.as_bytes(), data, "a verified record keeps its bytes");
            decoded(stream, &record);
        }
        Err(StoreError::Corrupt { stream: s, version, detail }) => {
            assert_eq!((s, version), (stream, VERSION), "Corrupt names the record it was given");
            assert!(!detail.is_empty());
        }
        Err(other) => panic!("a seal failure must be Corrupt, got {other:?}"),
    }
}

fn sealed(stream: StreamId, data: &[u8]) {
    let record = Record::seal(data.to_vec());
    assert_eq!(record.body(), data, "seal only appends the checksum");
    let reread = Record::from_stored(stream, VERSION, record.as_bytes().to_vec());
    assert!(reread.as_ref().is_ok_and(|r| r == &record), "a sealed record verifies: {reread:?}");
    decoded(stream, &record);
}

fn decoded(stream: StreamId, record: &Record) {
    match codec::decode(stream, VERSION, record) {
        Ok(event) => {
            let encoded = codec::encode(&event).unwrap_or_else(|e| panic!("decoded {event:?} does not encode: {e}"));
            // Same format byte. The kind number may change only by an upcast: a legacy layout
            // is written again as the current kind of the same event (checked just below).
            assert_eq!(encoded.body().first(), record.body().first(), "format changed on re-encode");
            let again = codec::decode(stream, VERSION, &encoded)
                .unwrap_or_else(|e| panic!("re-encoded {event:?} does not decode: {e}"));
            assert_eq!(format!("{again:?}"), format!("{event:?}"), "re-encoding changed the event");
            let encoded_again = codec::encode(&again).unwrap_or_else(|e| panic!("{again:?} does not encode: {e}"));
            assert_eq!(encoded.as_bytes(), encoded_again.as_bytes(), "encode ∘ decode is not stable for {event:?}");
        }
        Err(e) => {
            assert_eq!((e.stream, e.version), (stream, VERSION), "DecodeError names the record it was given");
            assert!(!e.detail.is_empty());
        }
    }
}

fn snapshot(data: &[u8]) {
    let (Some(v), Some(body)) = (data.get(..2), data.get(2..)) else { return };
    let version = u64::from(u16::from_le_bytes([v[0], v[1]]));
    let snap = Snapshot::seal(version, body.to_vec());
    match decode_snapshot(&snap) {
        Ok(state) => {
            assert_eq!(state.version(), version, "a snapshot decodes to the version it claims");
            let encoded = encode_snapshot(&state).unwrap_or_else(|e| panic!("decoded state does not encode: {e}"));
            let again = decode_snapshot(&encoded).unwrap_or_else(|e| panic!("re-encoded state does not decode: {e}"));
            let encoded_again = encode_snapshot(&again).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(encoded.bytes, encoded_again.bytes, "snapshot encode ∘ decode is not stable");
        }
        Err(reason) => assert!(!reason.to_string().is_empty(), "{reason:?}"),
    }
}
