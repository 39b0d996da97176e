//! Numbers as people read them in ctxlog's sentences (events' descriptions, summaries,
//! placeholders, the CLI): digits grouped by thousands. A leaf: it imports nothing of the crate,
//! so the events and the renderings below the state can both use it.

/// `1234567` → `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}
