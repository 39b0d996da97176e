//! Workspace-level tests for ctxlog. The library part holds shared test support: the `Store`
//! conformance suite ([`conformance`]), one fixture per backend ([`conformance_fixtures`]), the
//! given/when/then harness for the fold ([`scenario`]), the harness of the compaction-engine
//! tests ([`engine_fixtures`]), the fault-injecting store wrapper ([`faulty_store`]) and a fake
//! model provider ([`provider`]).
//! The test targets live in `tests/`.

// This crate is test support only: a failed unwrap here is a failed test, which is what we want.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

pub mod conformance;
pub mod conformance_fixtures;
pub mod engine_fixtures;
pub mod faulty_store;
pub mod gemini;
pub mod postgres;
pub mod postmortem;
pub mod provider;
pub mod responses;
pub mod scenario;
pub mod store_files;
pub mod summaries;
