//! The engine parts the workspace's own crates share (the tools and CLI, the proxy, benchmarks,
//! integration tests, fuzz targets), outside the semver promise (`docs/public-api.md`).
//!
//! Core's engine modules are private; each name a sibling crate needs is re-exported here on
//! purpose, under the module it lives in, so the list is short, reviewed, and grows only in a
//! diff that shows it (`docs/public-surface.txt`). A host embedding ctxlog needs none of it: the
//! crate root and the public data modules (`event`, `state`, `replay`, …) are the API.

/// Cache breakpoints placed on a view (the proxy's `--cache-breakpoints`).
pub mod breakpoints {
    pub use crate::breakpoints::{Mark, Origin, Placement};
}

/// The pure decision of one call (the benchmarks time it alone).
pub mod engine {
    pub use crate::engine::decide;
}

/// Image sizes read from their headers (the token formula's input).
pub mod media {
    pub use crate::media::dimensions;
}

/// What a view shows where hidden messages were.
pub mod placeholder {
    pub use crate::placeholder::{message, text};
}

/// The ladder and its guards, run alone by scenario tests and benchmarks.
pub mod policy {
    /// The ladder's levels.
    pub mod ladder {
        pub use crate::policy::ladder::{floor, run, MAX_GROUP};
    }
    /// What no level may remove.
    pub mod guards {
        pub use crate::policy::guards::unremovable_floor;
    }
}

/// The token estimate.
pub mod tokens {
    pub use crate::tokens::{text_tokens, Estimator, BLOCK_OVERHEAD, MESSAGE_OVERHEAD};
}

/// Rendering a view's items and digesting them.
pub mod view {
    pub use crate::view::{
        digest_of, edited_message, edited_message_as, item_message, render_item, render_item_with, thousands,
        ViewCache, STUB_MIN_CHARS, STUB_PREVIEW_CHARS,
    };
}

/// The wire formats: parsing a client's messages, rendering them back.
pub mod wire {
    pub use crate::wire::{
        check_format, decode_base64, detect, encode_base64, parse_at, parse_in, parse_message, parse_timestamp_ms,
        to_json, to_json_in, usage_of, BlobSource, Media, RenderOpts, WireError, WireFormat, MAX_CONTENT_NESTING,
    };
    /// Gemini contents.
    pub mod gemini {
        pub use crate::wire::gemini::parse_content_at;
    }
    /// OpenAI Responses items.
    pub mod responses {
        pub use crate::wire::responses::{is_instructions, parse_item};
    }
}
