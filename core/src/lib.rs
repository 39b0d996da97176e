//! ctxlog: keeps an LLM conversation inside its context window without losing anything,
//! without breaking the provider's prompt cache, and with every decision recorded as an event.
//!
//! This crate is the sans-IO core: it performs no IO and reads no clock. Time comes in as an
//! argument, storage through the [`store::Store`] trait.

pub mod store;

pub use store::{
    BlobId, ExpectedVersion, MemoryStore, Record, Snapshot, Store, StoreError, StoredRecord, StreamId, Version,
};
