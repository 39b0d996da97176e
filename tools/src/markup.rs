//! Writing HTML and SVG by hand: escaping, numbers for coordinates, and an element builder
//! that always closes what it opens, so the output is well-formed XML as well as HTML.

use std::fmt::Write;

/// Escapes text for an element's content or a quoted attribute.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A coordinate with two decimals, without trailing zeros (`12`, `12.5`, `12.25`).
pub fn num(v: f64) -> String {
    let v = if v.is_finite() { v } else { 0.0 };
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_owned()
    } else {
        s.to_owned()
    }
}

/// A document under construction.
#[derive(Debug, Default)]
pub struct Doc {
    out: String,
    open: Vec<&'static str>,
}

impl Doc {
    /// An empty document.
    pub fn new() -> Doc {
        Doc::default()
    }

    fn tag(&mut self, name: &str, attrs: &[(&str, String)]) {
        self.out.push('<');
        self.out.push_str(name);
        for (k, v) in attrs {
            let _ = write!(self.out, " {k}=\"{}\"", esc(v));
        }
    }

    /// Opens `<name attrs>`; [`Doc::close`] closes it.
    pub fn open(&mut self, name: &'static str, attrs: &[(&str, String)]) -> &mut Doc {
        self.tag(name, attrs);
        self.out.push('>');
        self.open.push(name);
        self
    }

    /// Closes the innermost open element.
    pub fn close(&mut self) -> &mut Doc {
        if let Some(name) = self.open.pop() {
            let _ = write!(self.out, "</{name}>");
        }
        self
    }

    /// An element with no content, written `<name attrs/>`.
    pub fn empty(&mut self, name: &str, attrs: &[(&str, String)]) -> &mut Doc {
        self.tag(name, attrs);
        self.out.push_str("/>");
        self
    }

    /// `<name attrs>text</name>`.
    pub fn text_el(&mut self, name: &'static str, attrs: &[(&str, String)], text: &str) -> &mut Doc {
        self.open(name, attrs).text(text).close()
    }

    /// Escaped text.
    pub fn text(&mut self, text: &str) -> &mut Doc {
        self.out.push_str(&esc(text));
        self
    }

    /// Markup written elsewhere (already well-formed).
    pub fn raw(&mut self, markup: &str) -> &mut Doc {
        self.out.push_str(markup);
        self
    }

    /// A line break in the source, for people reading it.
    pub fn nl(&mut self) -> &mut Doc {
        self.out.push('\n');
        self
    }

    /// The markup, with every element closed.
    pub fn finish(mut self) -> String {
        while !self.open.is_empty() {
            self.close();
        }
        self.out
    }
}

/// `(name, value)` for attribute lists.
pub fn a(name: &'static str, value: impl ToString) -> (&'static str, String) {
    (name, value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_attributes_are_escaped_and_every_element_is_closed() {
        let mut d = Doc::new();
        d.open("g", &[a("class", "x\"<y>")]).text_el("title", &[], "a & b < c").empty("rect", &[a("x", num(1.5))]);
        assert_eq!(d.finish(), "<g class=\"x&quot;&lt;y&gt;\"><title>a &amp; b &lt; c</title><rect x=\"1.5\"/></g>");
    }

    #[test]
    fn numbers_have_at_most_two_decimals_and_no_trailing_zeros() {
        assert_eq!([num(12.0), num(12.5), num(12.256), num(-0.001), num(f64::NAN)], ["12", "12.5", "12.26", "0", "0"]);
    }
}
