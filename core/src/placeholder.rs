//! The placeholder: what stands in the view where messages were hidden with no summary covering
//! them (removed by the ladder, or flushed under a summary that was retired), so a model reading
//! the view can tell what was left out and how to get it back (issue 21, view version 2).
//!
//! Its text depends only on which messages it stands for (their seqs, roles and tool names), so
//! the same hidden set renders the same bytes call after call and the prompt cache holds. The
//! exact form is documented in `docs/log-format.md` ("Placeholders").

pub use crate::state::placeholder::{composition, message, text, Composition, NAMED_TOOLS};
