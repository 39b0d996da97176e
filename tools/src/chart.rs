//! The report's chart, as hand-written SVG: four panels over the calls of a session — view
//! tokens against the budget, trigger and target lines (with flushes, guards and deferrals);
//! whether each call could read its prefix from the provider's cache; edits stacked by kind;
//! cumulative cost under the prompt-cache price model against its lower bound.
//!
//! Hand-written rather than drawn with a plotting crate: the chart is a few hundred elements of
//! five kinds, and writing them directly gives what a plotting backend does not — a class and a
//! `data-call` on every mark, a `<title>` tooltip and a link to the call's table row on every
//! call, exact colours the browser check can look for — with no dependency at all. Every mark
//! is computed from [`Analysis::calls`], and the tests read the numbers back from the geometry.

use ctxlog::internal::view::thousands;

use crate::analysis::{Analysis, Call};
use crate::markup::{a, num, Doc};

/// Width of the chart in pixels.
pub const WIDTH: f64 = 1100.0;
/// The budget line's colour: no other mark uses it, so a screenshot can be searched for it.
pub const BUDGET_COLOR: &str = "#d62728";
/// The SVG namespace (only written into a standalone `.svg`; inline SVG in HTML needs none).
const SVG_NS: &str = "http://www.w3.org/2000/svg";

const LEFT: f64 = 78.0;
const RIGHT: f64 = 22.0;
const LEGEND: f64 = 78.0;
const TOKENS_H: f64 = 300.0;
const STRIP_H: f64 = 14.0;
const EDITS_H: f64 = 64.0;
const COST_H: f64 = 110.0;
const GAP: f64 = 24.0;
const AXIS: f64 = 34.0;

const VIEW: &str = "#1f77b4";
const SUMMARY: &str = "#c5b0d5";
const REPORTED: &str = "#17becf";
const TRIGGER: &str = "#ff7f0e";
const TARGET: &str = "#2ca02c";
const FLUSH: &str = "#7f7f7f";
const GUARD: &str = "#e377c2";
const DEFERRED: &str = "#bcbd22";
const CACHE: [(&str, &str, &str); 3] = [
    ("cache-read", "#98df8a", "prefix read from the cache"),
    ("cache-miss", "#ff9896", "prefix rewritten while the cache was warm"),
    ("cache-cold", "#dddddd", "cache cold (first call or idle past the TTL)"),
];
const EDITS: [(&str, &str); 4] =
    [("removed", "#8c564b"), ("truncated", "#c49c94"), ("stubbed", "#9edae5"), ("summary_retired", "#9467bd")];
/// The context-editing kinds (issue 23): drawn, and in the legend, only in sessions that have them.
const CLEARS: [(&str, &str); 2] = [("cleared", "#dbdb8d"), ("trimmed", "#aec7e8")];
const COST: &str = "#393b79";

/// What to draw besides the session.
#[derive(Debug, Clone, Copy, Default)]
pub struct ChartOptions {
    /// Mark this call.
    pub selected: Option<u64>,
    /// A standalone `.svg` file (declares the SVG namespace) rather than SVG inside HTML.
    pub standalone: bool,
}

/// Vertical extent of a panel and the value at its top.
#[derive(Debug, Clone, Copy)]
struct Panel {
    top: f64,
    height: f64,
    max: f64,
}

impl Panel {
    fn y(&self, v: f64) -> f64 {
        self.top + self.height - (v / self.max).clamp(0.0, 1.0) * self.height
    }

    fn bottom(&self) -> f64 {
        self.top + self.height
    }
}

/// Horizontal bands, one per call.
#[derive(Debug, Clone, Copy)]
struct Bands {
    n: usize,
}

impl Bands {
    fn width(&self) -> f64 {
        (WIDTH - LEFT - RIGHT) / self.n.max(1) as f64
    }

    fn left(&self, i: usize) -> f64 {
        LEFT + i as f64 * self.width()
    }

    fn center(&self, i: usize) -> f64 {
        self.left(i) + self.width() / 2.0
    }
}

/// Height of the chart in pixels.
pub fn height() -> f64 {
    LEGEND + TOKENS_H + GAP + STRIP_H + GAP + EDITS_H + GAP + COST_H + AXIS
}

/// The chart of `analysis` as SVG markup.
pub fn chart(analysis: &Analysis, opts: ChartOptions) -> String {
    let calls = &analysis.calls;
    let h = height();
    let mut d = Doc::new();
    let mut root = vec![
        a("viewBox", format!("0 0 {} {}", num(WIDTH), num(h))),
        a("width", num(WIDTH)),
        a("height", num(h)),
        a("role", "img"),
        a("class", "ctxlog-chart"),
        a("data-calls", calls.len()),
        a("font-family", "DejaVu Sans, Liberation Sans, Arial, sans-serif"),
        a("font-size", 11),
    ];
    if opts.standalone {
        root.insert(0, a("xmlns", SVG_NS));
    }
    d.open("svg", &root);
    d.text_el("title", &[], &format!("ctxlog session {}: {} calls", analysis.session, calls.len()));
    d.empty("rect", &[a("x", 0), a("y", 0), a("width", num(WIDTH)), a("height", num(h)), a("fill", "#ffffff")]);
    d.nl();
    let clears = calls.iter().any(|c| c.record.edits.iter().any(|e| CLEARS.iter().any(|(k, _)| e.kind == *k)));
    legend(&mut d, clears);
    if calls.is_empty() {
        d.text_el(
            "text",
            &[a("x", num(WIDTH / 2.0)), a("y", num(LEGEND + 40.0)), a("text-anchor", "middle")],
            "no calls yet",
        );
        return d.finish();
    }
    let bands = Bands { n: calls.len() };
    let tokens = Panel { top: LEGEND, height: TOKENS_H, max: nice(token_max(calls) * 1.04).0 };
    let strip = Panel { top: tokens.bottom() + GAP, height: STRIP_H, max: 1.0 };
    let edit_max = calls.iter().map(|c| c.record.edits.len()).max().unwrap_or(0).max(1) as f64;
    let edit_max = if edit_max <= 5.0 { edit_max } else { nice(edit_max).0 };
    let edits = Panel { top: strip.bottom() + GAP, height: EDITS_H, max: edit_max };
    let cost_max = calls.last().map_or(0.0, |c| c.price.cumulative.max(c.price.cumulative_lower_bound));
    let cost = Panel { top: edits.bottom() + GAP, height: COST_H, max: nice(cost_max.max(1.0)).0 };
    if let Some(i) = opts.selected.and_then(|s| usize::try_from(s).ok()).filter(|&i| i < calls.len()) {
        d.empty(
            "rect",
            &[
                a("class", "selected-call"),
                a("data-call", i),
                a("x", num(bands.left(i))),
                a("y", num(tokens.top)),
                a("width", num(bands.width().max(2.0))),
                a("height", num(cost.bottom() - tokens.top)),
                a("fill", "#ffd54f"),
                a("fill-opacity", "0.5"),
            ],
        );
    }
    tokens_panel(&mut d, calls, bands, tokens);
    strip_panel(&mut d, calls, bands, strip);
    edits_panel(&mut d, calls, bands, edits);
    cost_panel(&mut d, calls, bands, cost);
    x_axis(&mut d, calls.len(), bands, cost.bottom());
    hits(&mut d, calls, bands, tokens.top, cost.bottom());
    d.finish()
}

fn token_max(calls: &[Call]) -> f64 {
    calls
        .iter()
        .map(|c| {
            let r = &c.record;
            r.view_tokens.max(r.budget).max(r.trigger_tokens).max(r.reported_tokens.unwrap_or(0))
        })
        .max()
        .unwrap_or(1)
        .max(1) as f64
}

/// The smallest "round" number ≥ `v` (1, 2, 2.5 or 5 × 10^k steps, at most five of them), and
/// its step.
pub fn nice(v: f64) -> (f64, f64) {
    let v = if v.is_finite() && v > 0.0 { v } else { 1.0 };
    let mut step = 10f64.powf((v / 5.0).log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if v / (step * m) <= 5.0 {
            step *= m;
            break;
        }
    }
    ((v / step).ceil() * step, step)
}

/// `80k`, `1.2M`, `950`.
pub fn short(v: f64) -> String {
    let (div, unit) = match v.abs() {
        x if x >= 1e6 => (1e6, "M"),
        x if x >= 1e3 => (1e3, "k"),
        _ => (1.0, ""),
    };
    let x = v / div;
    let s = if (x - x.round()).abs() < 0.05 { format!("{x:.0}") } else { format!("{x:.1}") };
    format!("{s}{unit}")
}

fn frame(d: &mut Doc, class: &str, p: Panel, label: &str) {
    d.empty(
        "rect",
        &[
            a("class", "frame"),
            a("data-panel", class),
            a("data-y-max", num(p.max)),
            a("x", num(LEFT)),
            a("y", num(p.top)),
            a("width", num(WIDTH - LEFT - RIGHT)),
            a("height", num(p.height)),
            a("fill", "none"),
            a("stroke", "#bbbbbb"),
        ],
    );
    d.text_el(
        "text",
        &[
            a("class", "panel-label"),
            a("x", num(LEFT - 8.0)),
            a("y", num(p.top - 8.0)),
            a("text-anchor", "end"),
            a("font-weight", "bold"),
        ],
        label,
    );
}

fn y_ticks(d: &mut Doc, p: Panel, step: f64) {
    let mut v = 0.0;
    while v <= p.max + step / 1000.0 {
        let y = p.y(v);
        if v > 0.0 {
            let line = [a("x1", num(LEFT)), a("x2", num(WIDTH - RIGHT)), a("y1", num(y)), a("y2", num(y))];
            d.empty("line", &[&line[..], &[a("stroke", "#eeeeee")]].concat());
        }
        d.text_el(
            "text",
            &[
                a("class", "y-tick"),
                a("x", num(LEFT - 6.0)),
                a("y", num(y + 4.0)),
                a("text-anchor", "end"),
                a("fill", "#555555"),
            ],
            &short(v),
        );
        v += step;
    }
}

fn points(pts: impl IntoIterator<Item = (f64, f64)>) -> String {
    pts.into_iter().map(|(x, y)| format!("{},{}", num(x), num(y))).collect::<Vec<_>>().join(" ")
}

fn polyline(d: &mut Doc, class: &str, pts: String, stroke: &str, width: f64, dash: Option<&str>) {
    let mut attrs = vec![
        a("class", class),
        a("points", pts),
        a("fill", "none"),
        a("stroke", stroke),
        a("stroke-width", num(width)),
    ];
    if let Some(dash) = dash {
        attrs.push(a("stroke-dasharray", dash));
    }
    d.empty("polyline", &attrs);
    d.nl();
}

/// A step line: flat across each call's band at that call's value.
fn steps(calls: &[Call], bands: Bands, p: Panel, value: impl Fn(&Call) -> u64) -> String {
    points(calls.iter().enumerate().flat_map(|(i, c)| {
        let y = p.y(value(c) as f64);
        [(bands.left(i), y), (bands.left(i) + bands.width(), y)]
    }))
}

fn tokens_panel(d: &mut Doc, calls: &[Call], bands: Bands, p: Panel) {
    frame(d, "tokens", p, "tokens");
    y_ticks(d, p, nice(p.max / 1.000_001).1);
    let base = p.bottom();
    let (first, last) = (bands.center(0), bands.center(calls.len() - 1));
    let area = |value: &dyn Fn(&Call) -> u64| {
        let line = calls.iter().enumerate().map(|(i, c)| (bands.center(i), p.y(value(c) as f64)));
        points(std::iter::once((first, base)).chain(line).chain(std::iter::once((last, base))))
    };
    d.empty(
        "polygon",
        &[
            a("class", "view-area"),
            a("points", area(&|c| c.record.view_tokens)),
            a("fill", "#aec7e8"),
            a("fill-opacity", "0.45"),
        ],
    );
    d.empty(
        "polygon",
        &[a("class", "summary-tokens"), a("points", area(&|c| c.record.summary_tokens)), a("fill", SUMMARY)],
    );
    d.nl();
    let view = points(calls.iter().enumerate().map(|(i, c)| (bands.center(i), p.y(c.record.view_tokens as f64))));
    polyline(d, "view-tokens", view, VIEW, 1.6, None);
    for (i, c) in calls.iter().enumerate() {
        if let Some(r) = c.record.reported_tokens {
            d.empty(
                "circle",
                &[
                    a("class", "reported"),
                    a("data-call", i),
                    a("cx", num(bands.center(i))),
                    a("cy", num(p.y(r as f64))),
                    a("r", 2),
                    a("fill", REPORTED),
                ],
            );
        }
    }
    polyline(d, "target", steps(calls, bands, p, |c| c.record.target_tokens), TARGET, 1.2, Some("6 4"));
    polyline(d, "trigger", steps(calls, bands, p, |c| c.record.trigger_tokens), TRIGGER, 1.2, Some("6 4"));
    polyline(d, "budget", steps(calls, bands, p, |c| c.record.budget), BUDGET_COLOR, 2.0, None);
    for (i, c) in calls.iter().enumerate() {
        let x = num(bands.center(i));
        if let Some(f) = &c.record.flush {
            d.open(
                "line",
                &[
                    a("class", "flush"),
                    a("data-call", i),
                    a("x1", &x),
                    a("x2", &x),
                    a("y1", num(p.top)),
                    a("y2", num(base)),
                    a("stroke", FLUSH),
                    a("stroke-dasharray", "3 3"),
                ],
            );
            d.text_el("title", &[], &format!("call {i}: flush {} {}→{}", f.reason, f.from, f.to)).close();
        }
        if c.record.deferred.is_some() {
            d.empty(
                "line",
                &[
                    a("class", "deferred"),
                    a("data-call", i),
                    a("x1", &x),
                    a("x2", &x),
                    a("y1", num(base - 8.0)),
                    a("y2", num(base)),
                    a("stroke", DEFERRED),
                    a("stroke-width", 2),
                ],
            );
        }
        if !c.record.guards.is_empty() {
            let cx = bands.center(i);
            let tri = points([(cx - 5.0, p.top + 1.0), (cx + 5.0, p.top + 1.0), (cx, p.top + 9.0)]);
            d.empty("polygon", &[a("class", "guard"), a("data-call", i), a("points", tri), a("fill", GUARD)]);
        }
    }
    d.nl();
}

/// How a call stood with the provider's cache: `cache-read`, `cache-miss` or `cache-cold`.
pub fn cache_class(c: &Call) -> &'static str {
    match (c.price.warm, c.record.prefix_reused) {
        (false, _) => "cache-cold",
        (true, true) => "cache-read",
        (true, false) => "cache-miss",
    }
}

fn strip_panel(d: &mut Doc, calls: &[Call], bands: Bands, p: Panel) {
    frame(d, "cache", p, "cache");
    for (i, c) in calls.iter().enumerate() {
        let class = cache_class(c);
        let fill = CACHE.iter().find(|(k, _, _)| *k == class).map_or("#dddddd", |(_, f, _)| f);
        d.empty(
            "rect",
            &[
                a("class", class),
                a("data-call", i),
                a("x", num(bands.left(i))),
                a("y", num(p.top)),
                a("width", num(bands.width())),
                a("height", num(p.height)),
                a("fill", fill),
            ],
        );
    }
    d.nl();
}

fn edits_panel(d: &mut Doc, calls: &[Call], bands: Bands, p: Panel) {
    frame(d, "edits", p, "edits");
    y_ticks(d, p, if p.max <= 5.0 { p.max } else { nice(p.max).1 });
    let inset = if bands.width() > 3.0 { 0.5 } else { 0.0 };
    let mut any = false;
    for (i, c) in calls.iter().enumerate() {
        let mut stacked = 0.0;
        for (kind, fill) in EDITS.into_iter().chain(CLEARS) {
            let n = c.record.edits.iter().filter(|e| e.kind == kind).count();
            if n == 0 {
                continue;
            }
            any = true;
            let (lo, hi) = (p.y(stacked), p.y(stacked + n as f64));
            stacked += n as f64;
            d.empty(
                "rect",
                &[
                    a("class", format!("edit edit-{kind}")),
                    a("data-call", i),
                    a("data-count", n),
                    a("x", num(bands.left(i) + inset)),
                    a("y", num(hi)),
                    a("width", num(bands.width() - 2.0 * inset)),
                    a("height", num(lo - hi)),
                    a("fill", fill),
                ],
            );
        }
    }
    if !any {
        d.text_el(
            "text",
            &[
                a("x", num(WIDTH / 2.0)),
                a("y", num(p.top + p.height / 2.0 + 4.0)),
                a("text-anchor", "middle"),
                a("fill", "#888888"),
            ],
            "no ladder edits",
        );
    }
    d.nl();
}

fn cost_panel(d: &mut Doc, calls: &[Call], bands: Bands, p: Panel) {
    frame(d, "cost", p, "cost");
    y_ticks(d, p, nice(p.max / 1.000_001).1);
    let line =
        |value: &dyn Fn(&Call) -> f64| points(calls.iter().enumerate().map(|(i, c)| (bands.center(i), p.y(value(c)))));
    polyline(d, "lower-bound", line(&|c| c.price.cumulative_lower_bound), FLUSH, 1.2, Some("5 3"));
    polyline(d, "cost", line(&|c| c.price.cumulative), COST, 1.8, None);
    if let Some(last) = calls.last() {
        let (cost, bound) = (last.price.cumulative, last.price.cumulative_lower_bound);
        let ratio = if bound > 0.0 { cost / bound } else { 1.0 };
        d.text_el(
            "text",
            &[a("class", "cost-total"), a("x", num(LEFT + 8.0)), a("y", num(p.top + 14.0)), a("fill", COST)],
            &format!(
                "{} base-price tokens in total; lower bound {} (×{ratio:.2})",
                thousands(cost.round() as u64),
                thousands(bound.round() as u64)
            ),
        );
    }
    d.nl();
}

fn x_axis(d: &mut Doc, n: usize, bands: Bands, y: f64) {
    // About ten ticks: a round step for half the calls, at most five to a half.
    let step = nice(n as f64 / 2.0).1.max(1.0) as usize;
    for i in (0..n).step_by(step) {
        let x = num(bands.center(i));
        d.empty("line", &[a("x1", &x), a("x2", &x), a("y1", num(y)), a("y2", num(y + 4.0)), a("stroke", "#888888")]);
        d.text_el(
            "text",
            &[
                a("class", "x-tick"),
                a("x", &x),
                a("y", num(y + 16.0)),
                a("text-anchor", "middle"),
                a("fill", "#555555"),
            ],
            &i.to_string(),
        );
    }
    d.text_el(
        "text",
        &[a("x", num(WIDTH - RIGHT)), a("y", num(y + 30.0)), a("text-anchor", "end"), a("fill", "#555555")],
        "call →",
    );
    d.nl();
}

/// One transparent band per call, over all panels: its tooltip, and a link to its table row.
fn hits(d: &mut Doc, calls: &[Call], bands: Bands, top: f64, bottom: f64) {
    for (i, c) in calls.iter().enumerate() {
        d.open("a", &[a("href", format!("#call-{i}"))]);
        d.open(
            "rect",
            &[
                a("class", "hit"),
                a("data-call", i),
                a("x", num(bands.left(i))),
                a("y", num(top)),
                a("width", num(bands.width())),
                a("height", num(bottom - top)),
                a("fill", "#000000"),
                a("fill-opacity", "0"),
            ],
        );
        d.text_el("title", &[], &tooltip(c)).close().close().nl();
    }
}

/// What hovering a call says.
pub fn tooltip(c: &Call) -> String {
    let r = &c.record;
    let time = ctxlog::time::format_rfc3339(c.at_ms);
    let mut s = format!(
        "call {} at {}: {} messages, {} tokens (budget {})",
        r.call,
        time.get(11..19).unwrap_or(&time),
        r.view_messages,
        thousands(r.view_tokens),
        thousands(r.budget)
    );
    if let Some(f) = &r.flush {
        s.push_str(&format!("; flush {} {}→{}", f.reason, f.from, f.to));
    }
    if !r.edits.is_empty() {
        s.push_str(&format!("; {} edit(s)", r.edits.len()));
    }
    for g in &r.guards {
        s.push_str(&format!("; guard {}", g.kind));
    }
    if let Some(dfr) = &r.deferred {
        s.push_str(&format!("; deferred ({})", dfr.reason));
    }
    let cache = CACHE.iter().find(|(k, _, _)| *k == cache_class(c)).map_or("", |(_, _, t)| t);
    s.push_str(&format!("; {cache}; cost {}", thousands(c.price.cost.round() as u64)));
    s
}

/// Draws a legend's mark at `(x, y)`.
type Mark = Box<dyn Fn(&mut Doc, f64, f64)>;

fn legend(d: &mut Doc, clears: bool) {
    let line = |color: &'static str, dash: Option<&'static str>| {
        move |d: &mut Doc, x: f64, y: f64| {
            let mut at = vec![
                a("x1", num(x)),
                a("x2", num(x + 18.0)),
                a("y1", num(y)),
                a("y2", num(y)),
                a("stroke", color),
                a("stroke-width", 2),
            ];
            if let Some(dash) = dash {
                at.push(a("stroke-dasharray", dash));
            }
            d.empty("line", &at);
        }
    };
    let swatch = |color: &'static str| {
        move |d: &mut Doc, x: f64, y: f64| {
            d.empty(
                "rect",
                &[a("x", num(x + 3.0)), a("y", num(y - 5.0)), a("width", 12), a("height", 10), a("fill", color)],
            );
        }
    };
    let rows: [Vec<(&str, Mark)>; 2] = [
        vec![
            ("view tokens", Box::new(line(VIEW, None))),
            ("summaries in the view", Box::new(swatch(SUMMARY))),
            (
                "reported by the provider",
                Box::new(|d: &mut Doc, x: f64, y: f64| {
                    d.empty("circle", &[a("cx", num(x + 9.0)), a("cy", num(y)), a("r", 3), a("fill", REPORTED)]);
                }),
            ),
            ("budget", Box::new(line(BUDGET_COLOR, None))),
            ("trigger", Box::new(line(TRIGGER, Some("6 4")))),
            ("target", Box::new(line(TARGET, Some("6 4")))),
            ("flush", Box::new(line(FLUSH, Some("3 3")))),
            (
                "guard",
                Box::new(|d: &mut Doc, x: f64, y: f64| {
                    d.empty(
                        "polygon",
                        &[
                            a("points", points([(x + 4.0, y - 4.0), (x + 14.0, y - 4.0), (x + 9.0, y + 4.0)])),
                            a("fill", GUARD),
                        ],
                    );
                }),
            ),
            ("deferred", Box::new(swatch(DEFERRED))),
        ],
        CACHE
            .iter()
            .map(|(_, fill, text)| (*text, Box::new(swatch(fill)) as Mark))
            .chain(EDITS.iter().map(|(kind, fill)| (*kind, Box::new(swatch(fill)) as Mark)))
            .chain(CLEARS.iter().filter(|_| clears).map(|(kind, fill)| (*kind, Box::new(swatch(fill)) as Mark)))
            .chain([("cost", Box::new(line(COST, None)) as Mark), ("lower bound", Box::new(line(FLUSH, Some("5 3"))))])
            .collect(),
    ];
    d.open("g", &[a("class", "legend")]);
    let mut y = 16.0;
    for items in &rows {
        let mut x = LEFT;
        for (text, mark) in items {
            let w = 30.0 + 6.4 * text.chars().count() as f64;
            if x + w > WIDTH - RIGHT && x > LEFT {
                x = LEFT;
                y += 18.0;
            }
            mark(d, x, y);
            d.text_el("text", &[a("x", num(x + 22.0)), a("y", num(y + 4.0)), a("fill", "#333333")], text);
            x += w;
        }
        y += 18.0;
    }
    d.close().nl();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_rounds_up_to_a_few_round_steps() {
        assert_eq!(nice(83_200.0), (100_000.0, 20_000.0));
        assert_eq!(nice(80_000.0), (80_000.0, 20_000.0));
        assert_eq!(nice(12.0), (12.5, 2.5));
        assert_eq!(nice(1.0), (1.0, 0.2));
        assert_eq!(nice(0.0), (1.0, 0.2));
    }

    #[test]
    fn short_numbers_keep_one_decimal_where_it_matters() {
        assert_eq!([short(80_000.0), short(1_250_000.0), short(950.0), short(0.0)], ["80k", "1.2M", "950", "0"]);
    }
}
