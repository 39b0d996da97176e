//! ctxlog command-line front end.

pub mod demo_transcript;
