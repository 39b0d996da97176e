//! `ctxlog report`: the page is one self-contained, well-formed HTML document (it parses as
//! XML), the chart is valid SVG, and every mark of the chart reads back to the number of the
//! timeline it stands for — timelines folded by the core, costs priced independently from the
//! `--views` file with `ctxlog::cost`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

use std::collections::BTreeSet;

use ctxlog::cost::{PrefixCache, TTL_MS};
use ctxlog::internal::view::thousands;
use ctxlog::replay::CallRecord;
use ctxlog_tests::postmortem::{Recorded, DEMO};
use roxmltree::{Document, Node};

const SVG_NS: &str = "http://www.w3.org/2000/svg";

/// Parses the page as XML (it is written well-formed); its `<!DOCTYPE html>` is a DTD to XML.
fn page(text: &str) -> Document<'_> {
    let opts = roxmltree::ParsingOptions { allow_dtd: true, ..Default::default() };
    Document::parse_with_options(text, opts).expect("the page is well-formed")
}

fn attr<'a>(n: &Node<'a, '_>, name: &str) -> &'a str {
    n.attribute(name).unwrap_or_else(|| panic!("<{}> has no {name}", n.tag_name().name()))
}

fn f(n: &Node<'_, '_>, name: &str) -> f64 {
    attr(n, name).parse().unwrap()
}

fn has_class(n: &Node<'_, '_>, class: &str) -> bool {
    n.attribute("class").is_some_and(|c| c.split(' ').any(|c| c == class))
}

fn by_class<'a, 'i>(doc: &'a Document<'i>, class: &str) -> Vec<Node<'a, 'i>> {
    doc.descendants().filter(|n| has_class(n, class)).collect()
}

fn one<'a, 'i>(doc: &'a Document<'i>, class: &str) -> Node<'a, 'i> {
    let all = by_class(doc, class);
    assert_eq!(all.len(), 1, "elements of class {class}");
    all[0]
}

fn points(n: &Node<'_, '_>) -> Vec<(f64, f64)> {
    attr(n, "points")
        .split(' ')
        .map(|p| {
            let (x, y) = p.split_once(',').unwrap();
            (x.parse().unwrap(), y.parse().unwrap())
        })
        .collect()
}

/// A panel's frame: reads a y coordinate back to the value it stands for.
struct Frame {
    x: f64,
    y: f64,
    w: f64,
    h: f64,
    max: f64,
}

impl Frame {
    fn of(doc: &Document<'_>, class: &str) -> Frame {
        let n = doc.descendants().find(|n| has_class(n, "frame") && n.attribute("data-panel") == Some(class)).unwrap();
        Frame { x: f(&n, "x"), y: f(&n, "y"), w: f(&n, "width"), h: f(&n, "height"), max: f(&n, "data-y-max") }
    }

    fn value(&self, y: f64) -> f64 {
        (self.y + self.h - y) / self.h * self.max
    }

    /// Half a unit of the coordinates' last decimal, in the panel's values.
    fn tolerance(&self) -> f64 {
        0.006 * self.max / self.h
    }

    fn center(&self, i: usize, n: usize) -> f64 {
        self.x + (i as f64 + 0.5) * self.w / n as f64
    }
}

fn calls_with(t: &[CallRecord], pred: impl Fn(&CallRecord) -> bool) -> BTreeSet<usize> {
    t.iter().enumerate().filter(|(_, r)| pred(r)).map(|(i, _)| i).collect()
}

fn data_calls(nodes: &[Node<'_, '_>]) -> BTreeSet<usize> {
    nodes.iter().map(|n| attr(n, "data-call").parse().unwrap()).collect()
}

/// What the views cost, priced from the `--views` file: each view shares with the previous one
/// its leading messages that are byte for byte the same.
fn priced_from_views(views: &str, timeline: &[CallRecord]) -> PrefixCache {
    let mut cache = PrefixCache::new();
    let mut previous: Vec<String> = Vec::new();
    for (line, r) in views.lines().zip(timeline) {
        type Raw = Box<serde_json::value::RawValue>;
        let v: std::collections::BTreeMap<String, Raw> = serde_json::from_str(line).unwrap();
        assert_eq!(v["call"].get(), r.call.to_string());
        let raw: Vec<Raw> = serde_json::from_str(v["messages"].get()).unwrap();
        let messages: Vec<String> = raw.iter().map(|m| m.get().to_owned()).collect();
        let shared = messages.iter().zip(&previous).take_while(|(a, b)| a == b).count();
        // The view's bytes are each message's JSON and a newline.
        let bytes = |ms: &[String]| ms.iter().map(|m| m.len() as u64 + 1).sum::<u64>();
        cache.call((r.at * 1000.0).round(), r.view_tokens, bytes(&messages[..shared]), bytes(&messages));
        previous = messages;
    }
    cache
}

#[test]
fn the_page_is_one_self_contained_well_formed_document_with_a_row_and_a_view_per_call() {
    let r = Recorded::demo(&["--budget", "30000"]);
    let html = r.path("report.html");
    let out = r.ok(&["report", "--out", &html]);
    assert!(out.starts_with("wrote "), "{out}");
    let text = std::fs::read_to_string(&html).unwrap();
    // Nothing to fetch: no URL at all, no script, no external stylesheet, font or image.
    for banned in ["http", "<script", "src=", "url(", "@import", "<link"] {
        assert!(!text.contains(banned), "the page contains {banned:?}");
    }
    assert!(text.starts_with("<!DOCTYPE html>\n<html lang=\"en\">"));
    let doc = page(&text);
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "html");
    let names: Vec<&str> = root.children().filter(Node::is_element).map(|n| n.tag_name().name()).collect();
    assert_eq!(names, ["head", "body"]);
    let svgs: Vec<_> = doc.descendants().filter(|n| n.has_tag_name("svg")).collect();
    assert_eq!(svgs.len(), 1, "one inline chart");
    let timeline = r.timeline(DEMO);
    assert_eq!(attr(&svgs[0], "data-calls"), timeline.len().to_string());
    let rows: Vec<_> = doc.descendants().filter(|n| n.has_tag_name("tr") && n.attribute("id").is_some()).collect();
    assert_eq!(rows.len(), timeline.len());
    for (i, (row, rec)) in rows.iter().zip(&timeline).enumerate() {
        assert_eq!(attr(row, "id"), format!("call-{i}"));
        let cells: Vec<String> = row
            .children()
            .filter(|n| n.has_tag_name("td"))
            .map(|n| n.descendants().filter(Node::is_text).map(|t| t.text().unwrap()).collect::<String>())
            .collect();
        assert_eq!(cells[0], rec.call.to_string());
        assert_eq!(cells[4], thousands(rec.view_tokens));
        assert_eq!(cells[7], rec.edits.len().to_string());
        // The row expands to its reasons: every edit's reason is in it.
        for e in &rec.edits {
            assert!(cells[11].contains(&e.reason), "call {i}: {}", cells[11]);
        }
        // And links to the view at that call, which is on the page.
        let link = row.descendants().find(|n| n.has_tag_name("a")).unwrap();
        let target = attr(&link, "href").strip_prefix('#').unwrap();
        let view = doc.descendants().find(|n| n.attribute("id") == Some(target)).unwrap();
        let summary = view.descendants().find(|n| n.has_tag_name("summary")).unwrap().text().unwrap();
        assert_eq!(summary, format!("call {i}: {} messages, {} tokens", rec.view_messages, thousands(rec.view_tokens)));
    }
    // Every link of the chart points at a row of the table.
    for a in doc.descendants().filter(|n| n.has_tag_name("a")) {
        let target = attr(&a, "href").strip_prefix('#').unwrap();
        assert!(doc.descendants().any(|n| n.attribute("id") == Some(target)), "dangling link #{target}");
    }
}

#[test]
fn every_mark_of_the_chart_reads_back_to_the_timeline() {
    let r = Recorded::new();
    let views = r.path("views.jsonl");
    // The legacy gate: no deferral marks (a cache-aware session's are tested below).
    r.run_demo(DEMO, &["--budget", "30000", "--no-cache-aware", "--views", &views]);
    let svg_path = r.path("chart.svg");
    r.ok(&["report", "--out", &svg_path]);
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let doc = Document::parse(&svg).expect("the chart is well-formed XML");
    let root = doc.root_element();
    assert_eq!((root.tag_name().name(), root.tag_name().namespace()), ("svg", Some(SVG_NS)));
    let t = r.timeline(DEMO);
    let n = t.len();
    assert!(n > 200 && t.iter().any(|c| !c.edits.is_empty()) && t.iter().any(|c| !c.guards.is_empty()));

    // View tokens: one point per call, at the call's band, at its tokens.
    let tokens = Frame::of(&doc, "tokens");
    let view = points(&one(&doc, "view-tokens"));
    assert_eq!(view.len(), n);
    for (i, ((x, y), rec)) in view.iter().zip(&t).enumerate() {
        assert!((x - tokens.center(i, n)).abs() < 0.006, "call {i}: x {x}");
        let v = tokens.value(*y);
        assert!((v - rec.view_tokens as f64).abs() <= tokens.tolerance(), "call {i}: {v} for {}", rec.view_tokens);
    }
    // Budget, trigger and target: steps at each call's values.
    for (class, value) in [
        ("budget", (|r: &CallRecord| r.budget) as fn(&CallRecord) -> u64),
        ("trigger", |r: &CallRecord| r.trigger_tokens),
        ("target", |r: &CallRecord| r.target_tokens),
    ] {
        let line = points(&one(&doc, class));
        assert_eq!(line.len(), 2 * n, "{class}");
        for (i, rec) in t.iter().enumerate() {
            for (_, y) in &line[2 * i..2 * i + 2] {
                assert!((tokens.value(*y) - value(rec) as f64).abs() <= tokens.tolerance(), "{class} at call {i}");
            }
        }
    }
    let budget = one(&doc, "budget");
    assert_eq!(attr(&budget, "stroke"), ctxlog_tools::chart::BUDGET_COLOR);
    // Flushes, guards: exactly at the calls that have them.
    assert_eq!(data_calls(&by_class(&doc, "flush")), calls_with(&t, |r| r.flush.is_some()));
    assert_eq!(data_calls(&by_class(&doc, "guard")), calls_with(&t, |r| !r.guards.is_empty()));
    assert!(by_class(&doc, "deferred").is_empty());
    // Edits: the bars of each call stack to its edits, kind by kind.
    let edits = Frame::of(&doc, "edits");
    for (i, rec) in t.iter().enumerate() {
        for kind in ["removed", "truncated", "stubbed", "summary_retired"] {
            let expected = rec.edits.iter().filter(|e| e.kind == kind).count();
            let bars: Vec<_> = by_class(&doc, &format!("edit-{kind}"))
                .into_iter()
                .filter(|b| attr(b, "data-call") == i.to_string())
                .collect();
            let drawn: f64 = bars.iter().map(|b| f(b, "height") / edits.h * edits.max).sum();
            assert!((drawn - expected as f64).abs() < 0.01, "call {i} {kind}: drew {drawn}, timeline {expected}");
        }
    }
    // The cache strip: read when the previous call was within the TTL and the prefix was
    // reused, a warm rewrite when it was not, cold otherwise.
    let mut previous_at: Option<f64> = None;
    for (i, rec) in t.iter().enumerate() {
        let warm = previous_at.is_some_and(|p| (rec.at - p) * 1000.0 < TTL_MS);
        let class = match (warm, rec.prefix_reused) {
            (false, _) => "cache-cold",
            (true, true) => "cache-read",
            (true, false) => "cache-miss",
        };
        let cell = doc
            .descendants()
            .find(|c| {
                c.has_tag_name("rect")
                    && c.attribute("data-call") == Some(&i.to_string())
                    && c.attribute("class").is_some_and(|k| k.starts_with("cache-"))
            })
            .unwrap();
        assert_eq!(attr(&cell, "class"), class, "call {i}");
        previous_at = Some(rec.at);
    }
    // Cumulative cost: the price model on the views the import wrote, independently.
    let priced = priced_from_views(&std::fs::read_to_string(&views).unwrap(), &t);
    let cost_frame = Frame::of(&doc, "cost");
    let cost = points(&one(&doc, "cost"));
    let (_, last) = cost[n - 1];
    assert!((cost_frame.value(last) - priced.totals.cost).abs() <= cost_frame.tolerance());
    let total = one(&doc, "cost-total").text().unwrap().to_owned();
    let expected = format!(
        "{} base-price tokens in total; lower bound {} (×{:.2})",
        thousands(priced.totals.cost.round() as u64),
        thousands(priced.totals.lower_bound.round() as u64),
        priced.totals.ratio()
    );
    assert_eq!(total, expected);
    // Every call has a tooltip with its time and numbers, and a link to its row.
    let hits = by_class(&doc, "hit");
    assert_eq!(hits.len(), n);
    for (i, (hit, rec)) in hits.iter().zip(&t).enumerate() {
        let title = hit.children().find(|c| c.has_tag_name("title")).unwrap().text().unwrap();
        let clock = ctxlog::time::format_rfc3339((rec.at * 1000.0).round() as u64)[11..19].to_owned();
        let want = format!(
            "call {i} at {clock}: {} messages, {} tokens (budget {})",
            rec.view_messages,
            thousands(rec.view_tokens),
            thousands(rec.budget)
        );
        assert!(title.starts_with(&want), "{title}");
        assert_eq!(attr(&hit.parent().unwrap(), "href"), format!("#call-{i}"));
    }
}

#[test]
fn deferred_calls_are_marked_on_a_cache_aware_session() {
    let r = Recorded::demo(&["--budget", "40000", "--cache-aware"]);
    let svg = r.path("c.svg");
    r.ok(&["report", "--out", &svg]);
    let text = std::fs::read_to_string(&svg).unwrap();
    let doc = Document::parse(&text).unwrap();
    let t = r.timeline(DEMO);
    let deferred = calls_with(&t, |r| r.deferred.is_some());
    assert!(!deferred.is_empty());
    assert_eq!(data_calls(&by_class(&doc, "deferred")), deferred);
}

#[test]
fn report_call_draws_the_session_up_to_that_call_and_marks_it() {
    let r = Recorded::demo(&[]);
    let html = r.path("r.html");
    r.ok(&["report", "--out", &html, "--call", "221"]);
    let text = std::fs::read_to_string(&html).unwrap();
    let doc = page(&text);
    let svg = doc.descendants().find(|n| n.has_tag_name("svg")).unwrap();
    assert_eq!(attr(&svg, "data-calls"), "222");
    assert_eq!(attr(&one(&doc, "selected-call"), "data-call"), "221");
    let row = doc.descendants().find(|n| n.attribute("id") == Some("call-221")).unwrap();
    assert_eq!(attr(&row, "class"), "selected");
    assert!(!doc.descendants().any(|n| n.attribute("id") == Some("call-222")));
}

#[test]
fn report_refuses_what_it_cannot_draw() {
    let r = Recorded::demo(&[]);
    let (code, out, err) = r.run(&["report", "--out", &r.path("r.png")]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(err.contains("--out") && err.contains(".svg"), "{err}");
    let (code, _, err) = r.run(&["report", "--out", &r.path("r.html"), "--call", "271"]);
    assert_eq!(code, 2);
    assert!(err.contains("271 calls (0–270)"), "{err}");
    assert!(!std::path::Path::new(&r.path("r.html")).exists(), "nothing written");
}

#[test]
fn a_session_with_no_calls_is_drawn_empty() {
    let r = Recorded::new();
    // A transcript without an assistant line makes no call.
    r.import(DEMO, "{\"role\":\"user\",\"content\":\"hello\"}\n", &[]);
    let html = r.path("r.html");
    r.ok(&["report", "--out", &html]);
    let text = std::fs::read_to_string(&html).unwrap();
    let doc = page(&text);
    assert!(text.contains("no calls yet"));
    assert_eq!(by_class(&doc, "hit").len(), 0);
}
