//! ctxlog: keeps an LLM conversation inside its context window without losing anything,
//! without breaking the provider's prompt cache, and with every decision recorded as an event.
//!
//! This crate is the sans-IO core: it performs no IO and reads no clock. Time comes in as an
//! argument (`now`, `at`), storage through the [`store::Store`] trait, summaries through
//! effects the host fulfils.

pub mod codec;
pub mod config;
pub mod engine;
pub mod event;
pub mod json;
pub mod media;
pub mod message;
pub mod policy;
pub mod replay;
pub mod request;
pub mod session;
pub mod state;
pub mod store;
pub mod summary;
pub mod time;
pub mod tokens;
mod trace;
pub mod transfer;
pub mod usage;
pub mod view;
pub mod wire;

pub use config::Config;
pub use event::Event;
pub use message::Message;
pub use request::{Request, RequestOptions};
pub use session::{Plan, Session, SessionError};
pub use state::State;
pub use store::{
    BlobId, ExpectedVersion, MemoryStore, Record, Snapshot, Store, StoreError, StoredRecord, StreamId, Version,
};
pub use usage::Usage;
pub use wire::WireFormat;
