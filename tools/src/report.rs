//! `ctxlog report`: one self-contained HTML page per session — the chart, the calls as a table
//! whose rows expand to their reasons, and the view at each call — or the chart alone as SVG.
//! Nothing in it is fetched: no script, no stylesheet, no font, no image from elsewhere.

use ctxlog::config::{Config, SummarizerKind};
use ctxlog::internal::view::thousands;
use ctxlog::replay::Mode;

use crate::analysis::{analyze, open_session, Analysis, Call, Keep, Run, Until};
use crate::args::ReportArgs;
use crate::chart::{cache_class, chart, ChartOptions};
use crate::error::{output, CliError};
use crate::lineage::Lineage;
use crate::markup::{a, Doc};
use crate::output::{details, summary, Out};

const STYLE: &str = "
body { font-family: 'DejaVu Sans', 'Liberation Sans', Arial, sans-serif; font-size: 14px; color: #222; margin: 24px; max-width: 1140px; }
h1 { font-size: 20px; margin-bottom: 4px; }
h2 { font-size: 16px; margin-top: 28px; }
.meta, .knobs { color: #555; margin: 2px 0; }
ul.facts { margin: 8px 0 16px; padding-left: 20px; }
figure { margin: 0; }
table.calls { border-collapse: collapse; font-size: 12px; width: 100%; }
table.calls th, table.calls td { border-bottom: 1px solid #e4e4e4; padding: 2px 6px; vertical-align: top; }
table.calls th { text-align: left; background: #f4f4f4; position: sticky; top: 0; }
table.calls th.n { text-align: right; }
table.calls td.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.calls tr.selected td { background: #fff3c4; }
table.calls tr:target td { background: #fff3c4; }
td.cache-read { color: #2c7a2c; } td.cache-miss { color: #c0392b; font-weight: bold; } td.cache-cold { color: #777; }
details summary { cursor: pointer; color: #1f4e99; }
details ul { margin: 4px 0; padding-left: 18px; }
section.views details { margin: 2px 0; font-size: 12px; }
code { font-size: 12px; background: #f4f4f4; padding: 1px 3px; }
";

/// `report`
pub fn report(args: &ReportArgs, out: &mut Out<'_>) -> Result<(), CliError> {
    let (store, id) = open_session(&args.session)?;
    let until = args.call.map_or(Until::Head, Until::Call);
    let analysis = analyze(store.as_ref(), id, Mode::Strict, until, Keep { views: true })?;
    let ext = args.out.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    let opts = ChartOptions { selected: args.call, standalone: true };
    let text = match ext.as_deref() {
        Some("svg") => format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n{}\n", chart(&analysis, opts)),
        Some("html" | "htm") => {
            let lineage = crate::catalog::lineage_of(store.as_ref(), id, &analysis.links);
            page(&analysis, &lineage, &args.session.store.store, args.call)
        }
        _ => {
            return Err(CliError::Flag {
                flag: "--out",
                message: format!(
                    "--out {}: name an .html file (the report) or an .svg file (the chart)",
                    args.out.display()
                ),
            })
        }
    };
    std::fs::write(&args.out, &text).map_err(output(&args.out.display().to_string()))?;
    let calls = analysis.calls.len();
    match args.session.store.json {
        true => out.line(
            &serde_json::json!({"session": id.to_string(), "out": args.out.display().to_string(), "calls": calls, "bytes": text.len()})
                .to_string(),
        ),
        false => out.line(&format!("wrote {} ({} calls, {} bytes)", args.out.display(), calls, thousands(text.len() as u64))),
    }
}

/// The whole page.
pub fn page(analysis: &Analysis, lineage: &Lineage, store: &str, selected: Option<u64>) -> String {
    let id = analysis.session;
    let st = &analysis.state;
    let config = st.info().map(|i| i.config.clone()).unwrap_or_default();
    let mut d = Doc::new();
    d.raw("<!DOCTYPE html>\n");
    d.open("html", &[a("lang", "en")]).nl();
    d.open("head", &[]);
    d.empty("meta", &[a("charset", "utf-8")]);
    d.empty("meta", &[a("name", "viewport"), a("content", "width=device-width, initial-scale=1")]);
    d.text_el("title", &[], &format!("ctxlog report: session {id}"));
    d.open("style", &[]).raw(STYLE).close();
    d.close().nl();
    d.open("body", &[]).nl();
    d.text_el("h1", &[], &format!("Session {id}"));
    let calls = &analysis.calls;
    let span = match (calls.first(), calls.last()) {
        (Some(f), Some(l)) => format!(
            ", {} calls from {} to {}",
            calls.len(),
            ctxlog::time::format_rfc3339(f.at_ms),
            ctxlog::time::format_rfc3339(l.at_ms)
        ),
        _ => ", no calls".to_owned(),
    };
    let upto = selected.map_or_else(String::new, |c| format!(" up to call {c}"));
    d.text_el(
        "p",
        &[a("class", "meta")],
        &format!("{} messages{span}{upto}; store {store}, version {}.", st.message_count(), st.version()),
    );
    d.text_el("p", &[a("class", "knobs")], &format!("Knobs: {}.", knobs(&config)));
    d.open("ul", &[a("class", "facts")]);
    let records: Vec<_> = calls.iter().map(|c| c.record.clone()).collect();
    for line in summary(&records, analysis.host_guards.len()) {
        d.text_el("li", &[], &line);
    }
    let compactions: Vec<String> = analysis
        .messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.provider_compaction)
        .map(|(seq, _)| format!("seq {seq}"))
        .collect();
    if !compactions.is_empty() {
        d.text_el(
            "li",
            &[],
            &format!(
                "provider compaction at {}: the provider's own summary of everything before it, kept pinned by ctxlog",
                compactions.join(", ")
            ),
        );
    }
    // Guards raised between calls have no row of their own: each is a fact here.
    for g in &analysis.host_guards {
        d.text_el("li", &[], g.detail_line().trim_start());
    }
    for l in lineage.sentences(id) {
        d.text_el("li", &[], &format!("Lineage: this session {l}."));
    }
    let t = &analysis.totals;
    let misses = calls.iter().filter(|c| cache_class(c) == "cache-miss").count();
    let first_miss = calls.iter().find(|c| cache_class(c) == "cache-miss").map(|c| c.record.call);
    d.text_el(
        "li",
        &[],
        &format!(
            "prefix rewritten while the cache was warm on {misses} calls{}; cost under the prompt-cache price model {} base-price tokens, lower bound {} (×{:.2})",
            first_miss.map_or_else(String::new, |c| format!(" (first: call {c})")),
            thousands(t.cost.round() as u64),
            thousands(t.lower_bound.round() as u64),
            t.ratio()
        ),
    );
    d.close().nl();
    d.open("figure", &[]);
    d.raw(&chart(analysis, ChartOptions { selected, standalone: false }));
    d.close().nl();
    d.text_el(
        "p",
        &[a("class", "meta")],
        "Cost: each call reads from the cache the longest prefix of whole messages it shares with the previous call if that call was less than 5 minutes ago (0.1× the base input price) and writes the rest (1.25×). The lower bound prices the same views as if no warm prefix were ever rewritten. Hover a call for its numbers; click it for its row.",
    );
    calls_table(&mut d, analysis, store, selected);
    views(&mut d, analysis, store);
    d.text_el("p", &[a("class", "meta")], &format!("Generated by ctxlog {}.", env!("CARGO_PKG_VERSION")));
    let mut html = d.finish();
    html.push('\n');
    html
}

/// The knobs, in flag names.
fn knobs(c: &Config) -> String {
    let summarizer = match c.summarizer {
        SummarizerKind::Extractive => "extractive",
        SummarizerKind::None => "none",
    };
    let mut parts = vec![
        format!("budget {}", thousands(c.budget)),
        format!("trigger {} ({})", c.trigger_ratio, thousands(c.trigger_tokens())),
        format!("target {} ({})", c.target_ratio, thousands(c.target_tokens())),
        format!("prepare {}", c.prepare_ratio),
        format!("summarizer {summarizer}"),
        format!("cache-aware {}", if c.cache_aware { "on" } else { "off" }),
        format!("ttl {} s", c.flush_ttl_ms as f64 / 1000.0),
        format!("protected-tools {}", c.protected_tool_results),
        format!("protected-recent {}", c.protected_recent_ratio),
        format!("breaker {}", c.breaker_passes),
        format!("summary-share {}", c.summary_share),
    ];
    if c.cache_aware {
        parts.push(format!("hard-limit {}", c.hard_limit_ratio));
        parts.push(format!("clear-at-least {}", c.clear_at_least));
    }
    if !c.exclude_tools.is_empty() {
        parts.push(format!("exclude-tools {}", c.exclude_tools.join(",")));
    }
    if c.clear_tool_inputs {
        parts.push("clear-tool-inputs".to_owned());
    }
    if c.tool_placeholder.is_some() {
        parts.push("tool results cleared to a placeholder".to_owned());
    }
    if let Some(n) = c.keep_thinking_turns {
        parts.push(format!("keep-thinking-turns {n}"));
    }
    parts.join(" · ")
}

fn calls_table(d: &mut Doc, analysis: &Analysis, store: &str, selected: Option<u64>) {
    d.text_el("h2", &[], "Calls");
    d.open("table", &[a("class", "calls")]).nl();
    d.open("thead", &[]).open("tr", &[]);
    for h in ["call", "time", "msgs", "view", "tokens", "level", "flush", "edits", "guards", "cache", "cost", "reasons"]
    {
        match ["flush", "guards", "cache", "reasons"].contains(&h) {
            true => d.text_el("th", &[], h),
            false => d.text_el("th", &[a("class", "n")], h),
        };
    }
    d.close().close().nl();
    d.open("tbody", &[]);
    for c in &analysis.calls {
        row(d, c, analysis, store, selected == Some(c.record.call));
    }
    d.close().close().nl();
}

fn row(d: &mut Doc, c: &Call, analysis: &Analysis, store: &str, selected: bool) {
    let r = &c.record;
    let mut attrs = vec![a("id", format!("call-{}", r.call))];
    if selected {
        attrs.push(a("class", "selected"));
    }
    d.open("tr", &attrs);
    let time = ctxlog::time::format_rfc3339(c.at_ms);
    let flush = r.flush.as_ref().map_or("-".to_owned(), |f| format!("{} {}→{}", f.reason, f.from, f.to));
    // A guard a host raised after this call (a divergence) is shown with it.
    let after: Vec<_> = analysis.host_guards.iter().filter(|g| g.after_call == Some(r.call)).collect();
    let kinds: Vec<String> =
        r.guards.iter().map(|g| g.kind.clone()).chain(after.iter().map(|g| g.record.kind.clone())).collect();
    let guards = if kinds.is_empty() { "-".to_owned() } else { kinds.join(", ") };
    let class = cache_class(c);
    let cache = match class {
        "cache-read" => "read",
        "cache-miss" => "rewritten (warm)",
        _ => "cold",
    };
    let cells: [(&str, String); 11] = [
        ("n", r.call.to_string()),
        ("n", time.get(11..19).unwrap_or(&time).to_owned()),
        ("n", r.messages.to_string()),
        ("n", r.view_messages.to_string()),
        ("n", thousands(r.view_tokens)),
        ("n", r.level.to_string()),
        ("", flush),
        ("n", r.edits.len().to_string()),
        ("", guards),
        (class, cache.to_owned()),
        ("n", thousands(c.price.cost.round() as u64)),
    ];
    for (class, text) in cells {
        match class {
            "" => d.text_el("td", &[], &text),
            class => d.text_el("td", &[a("class", class)], &text),
        };
    }
    d.open("td", &[]).open("details", &[]);
    let mut reasons = details(r);
    reasons.extend(after.iter().map(|g| g.detail_line()));
    d.text_el(
        "summary",
        &[],
        &if reasons.is_empty() { "view".to_owned() } else { format!("{} reason(s)", reasons.len()) },
    );
    d.open("ul", &[]);
    for line in &reasons {
        d.text_el("li", &[], line.trim());
    }
    d.text_el(
        "li",
        &[],
        &format!(
            "{}: {} of {} tokens read from the cache; cost {}, {} so far",
            cache,
            thousands(c.price.cached.round() as u64),
            thousands(r.view_tokens),
            thousands(c.price.cost.round() as u64),
            thousands(c.price.cumulative.round() as u64)
        ),
    );
    d.open("li", &[]);
    d.text_el("a", &[a("href", format!("#view-{}", r.call))], &format!("the view at call {}", r.call));
    d.text(" · exact bytes: ");
    d.text_el(
        "code",
        &[],
        &format!("ctxlog inspect --store {store} --session {} --call {} --view", analysis.session, r.call),
    );
    d.close();
    d.close().close().close();
    d.close().nl();
}

fn views(d: &mut Doc, analysis: &Analysis, store: &str) {
    d.open("section", &[a("class", "views")]);
    d.text_el("h2", &[], "The view at each call");
    for c in &analysis.calls {
        let r = &c.record;
        d.open("details", &[a("id", format!("view-{}", r.call))]);
        d.text_el(
            "summary",
            &[],
            &format!("call {}: {} messages, {} tokens", r.call, r.view_messages, thousands(r.view_tokens)),
        );
        d.open("ul", &[]);
        for run in &c.view {
            d.text_el("li", &[], &describe(run));
        }
        d.open("li", &[]);
        d.text_el(
            "code",
            &[],
            &format!("ctxlog inspect --store {store} --session {} --call {} --view", analysis.session, r.call),
        );
        d.close();
        d.close().close().nl();
    }
    d.close().nl();
}

/// One run of a view, for people.
pub fn describe(run: &Run) -> String {
    match run {
        Run::Messages { from, to, tokens, .. } if from == to => format!("seq {from} ({} tokens)", thousands(*tokens)),
        Run::Messages { from, to, count, tokens } => {
            let gaps =
                if to - from + 1 == *count { String::new() } else { format!(", {} removed", to - from + 1 - count) };
            format!("seq {from}–{to}: {count} messages{gaps}, {} tokens", thousands(*tokens))
        }
        Run::Edited { seq, kind, tokens } => format!("seq {seq}, {kind} ({} tokens)", thousands(*tokens)),
        Run::Summary { index, from, to, condensed, tokens } => format!(
            "{} #{index} of seq {from}–{} ({} tokens)",
            if *condensed { "condensed summary" } else { "summary" },
            to.saturating_sub(1),
            thousands(*tokens)
        ),
        Run::Placeholder { from, to, tokens } => {
            format!("placeholder for seq {from}–{} ({} tokens)", to.saturating_sub(1), thousands(*tokens))
        }
    }
}
