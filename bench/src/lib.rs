//! Benchmark support for ctxlog. The binaries live in `src/bin/`; see `BENCHMARKS.md` at the
//! workspace root for recorded results and how to reproduce them.

pub mod machine;
pub mod views;

/// The bundled demo session (`ctxlog demo`'s transcript), read as `ctxlog import` reads it.
///
/// # Panics
/// If the bundled transcript does not read: a broken fixture, nothing to recover.
#[allow(clippy::panic)]
pub fn demo_transcript() -> ctxlog_tools::transcript::Transcript {
    let text = ctxlog_workload::demo_transcript();
    ctxlog_tools::transcript::read(
        text.as_bytes(),
        std::path::Path::new("demo"),
        ctxlog_tools::transcript::FormatArg::Anthropic,
    )
    .unwrap_or_else(|e| panic!("the bundled demo transcript: {e}"))
}
