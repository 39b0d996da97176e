//! Embedding ctxlog in a host that calls a model: append, plan, dispatch, commit, prepare.
//! Run with `cargo run -p ctxlog --example embed`.

use ctxlog::session::Produced;
use ctxlog::wire::parse_message;
use ctxlog::{Config, MemoryStore, Session, StreamId, WireFormat};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = MemoryStore::new(); // or ctxlog_store_sqlite::SqliteStore::open("ctxlog.db")?
    let config = Config { budget: 200_000, cache_aware: true, ..Config::default() };
    let mut now = 1_767_225_600_000; // the host owns the clock: milliseconds since the epoch
    let mut session = Session::create(&store, StreamId::random(), WireFormat::Anthropic, config, now)?;
    session.append(vec![parse_message(
        r#"{"role":"user","content":"PROJECT PATH IS ~/Desktop/ora. Add CSV export."}"#,
    )?])?;

    for turn in 0..3 {
        let plan = session.plan(now)?; // pure: gate, ladder, guards; nothing written yet
        let (messages, _missing_blobs) = session.render_plan(&plan); // media inlined for the provider
        println!(
            "call {turn}: {} messages, ~{} tokens, prefix reused: {}",
            messages.len(),
            plan.view_tokens,
            plan.prefix_reused
        );
        // ... send `messages` to the model; on failure `session.abort(plan)` writes nothing ...
        now += 20_000;
        let usage = ctxlog::Usage { input: 150, cache_read: 1_050 + turn * 50, cache_write: 0, output: 40 };
        session.commit(plan, now, Some(usage))?; // durable first, then applied
        session.append(vec![parse_message(&format!(r#"{{"role":"assistant","content":"step {turn} done"}}"#))?])?;
        session.append(vec![parse_message(r#"{"role":"user","content":"continue"}"#)?])?;
        // Between calls, summarize what the engine asks for (here: the built-in summarizer):
        // spans of messages, and condensing the oldest summaries once they fill their share.
        if let Some(job) = session.summary_job() {
            let text = if job.is_condense() {
                ctxlog::summary::condense(session.state(), &job)
            } else {
                ctxlog::summary::extractive(session.state(), &job)
            };
            session.prepare(&job, text, Produced::extractive())?;
        }
    }
    let report = ctxlog::replay::verify(&store, session.id())?;
    println!("verify: {} events, ok = {}", report.events, report.ok());
    Ok(())
}
