//! Benchmark support for ctxlog. The binaries live in `src/bin/`; see `BENCHMARKS.md` at the
//! workspace root for recorded results and how to reproduce them.

pub mod machine;
pub mod views;
