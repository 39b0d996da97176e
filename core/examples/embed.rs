//! Embedding ctxlog in a host that calls a model, without async: append, plan, request,
//! commit, summaries between calls. Run with `cargo run -p ctxlog --example embed`.

use std::time::Duration;

use ctxlog::{
    parse_message, Config, Extractive, MemoryStore, RequestOptions, Session, StreamId, Timestamp, Usage, WireFormat,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = MemoryStore::new(); // or ctxlog_store_sqlite::SqliteStore::open("ctxlog.db")?
    let config = Config { budget: 200_000, cache_aware: true, ..Config::default() };
    // The host owns the clock: Timestamp::from_system_time(SystemTime::now()) in a service.
    let mut now = Timestamp::from_secs(1_767_225_600);
    let mut session = Session::create(&store, StreamId::random(), WireFormat::Anthropic, config, now)?;
    session.append(vec![
        parse_message(r#"{"role":"system","content":"You are a careful coding agent."}"#)?,
        parse_message(r#"{"role":"user","content":"PROJECT PATH IS ~/Desktop/ora. Add CSV export."}"#)?,
    ])?;
    let opts = RequestOptions::new().model("claude-sonnet-4-5").max_tokens(4_096);

    for turn in 0..3 {
        let plan = session.plan(now)?; // pure: gate, ladder, guards; nothing written yet
        let request = session.request(&plan, &opts)?; // the exact body: system apart, media inlined
        println!(
            "call {turn}: {} messages, ~{} tokens, prefix reused: {}, body {} bytes",
            plan.view_messages,
            plan.view_tokens,
            plan.prefix_reused,
            request.body().len()
        );
        // ... POST `request.body()`; on failure `session.abort(plan)` writes nothing ...
        let usage = serde_json::json!({
            "input_tokens": 40, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 1_000 * turn,
            "output_tokens": 150
        });
        now = now + Duration::from_secs(20);
        session.commit(plan, now, Some(Usage::from_anthropic(&usage)?))?; // durable first, then applied
        session.append(vec![parse_message(&format!(r#"{{"role":"assistant","content":"step {turn} done"}}"#))?])?;
        session.append(vec![parse_message(r#"{"role":"user","content":"continue"}"#)?])?;
        // Between calls, summarize what the engine asks for (here: the built-in summarizer):
        // spans of messages, and condensing the oldest summaries once they fill their share.
        // A host's own summarizer implements `Summarizer` (its text, or a model's answer); the
        // span's messages are `session.messages(job.from..job.to)`.
        session.run_summaries(&mut Extractive, usize::MAX)?;
    }
    let report = ctxlog::replay::verify(&store, session.id())?;
    println!("verify: {} events, ok = {}", report.events, report.ok());
    Ok(())
}
