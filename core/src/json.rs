//! A minimal JSON writer with serde_json's escaping. Views are written with it so that their
//! bytes are a pure function of the message model (key order fixed, raw JSON spliced verbatim).

/// Appends JSON to a byte buffer. Commas between members are tracked per nesting level.
#[derive(Default)]
pub(crate) struct JsonWriter {
    out: Vec<u8>,
    // One flag per open container: has it received a member yet?
    first: Vec<bool>,
}

impl JsonWriter {
    /// An empty writer.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The bytes written so far.
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.out
    }

    fn sep(&mut self) {
        if let Some(first) = self.first.last_mut() {
            if *first {
                *first = false;
            } else {
                self.out.push(b',');
            }
        }
    }

    /// `{`
    pub(crate) fn begin_object(&mut self) {
        self.sep();
        self.out.push(b'{');
        self.first.push(true);
    }

    /// `}`
    pub(crate) fn end_object(&mut self) {
        self.first.pop();
        self.out.push(b'}');
    }

    /// `[`
    pub(crate) fn begin_array(&mut self) {
        self.sep();
        self.out.push(b'[');
        self.first.push(true);
    }

    /// `]`
    pub(crate) fn end_array(&mut self) {
        self.first.pop();
        self.out.push(b']');
    }

    /// An object key; the next value call writes its value.
    pub(crate) fn key(&mut self, k: &str) {
        self.sep();
        escape_into(&mut self.out, k);
        self.out.push(b':');
        // The value that follows must not emit a separator.
        if let Some(first) = self.first.last_mut() {
            *first = true;
        }
    }

    /// A string value.
    pub(crate) fn string(&mut self, s: &str) {
        self.sep();
        escape_into(&mut self.out, s);
    }

    /// Already-valid JSON text, spliced verbatim.
    pub(crate) fn raw(&mut self, json: &str) {
        self.sep();
        self.out.extend_from_slice(json.as_bytes());
    }

    /// A boolean.
    pub(crate) fn bool(&mut self, b: bool) {
        self.raw(if b { "true" } else { "false" });
    }

    /// An unsigned integer.
    pub(crate) fn u64(&mut self, n: u64) {
        self.raw(&n.to_string());
    }

    /// `null`
    pub(crate) fn null(&mut self) {
        self.raw("null");
    }

    /// `"key": "value"`
    pub(crate) fn field_str(&mut self, k: &str, v: &str) {
        self.key(k);
        self.string(v);
    }
}

/// Writes `s` as a JSON string literal, escaping exactly as serde_json does.
pub(crate) fn escape_into(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if esc.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0xf)]);
        } else {
            out.extend_from_slice(esc);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_matches_serde_json() {
        for s in ["plain", "quote\" back\\slash", "ctl \u{0}\u{1}\u{1f}\n\r\t\u{8}\u{c}", "ünï ✓ /"] {
            let mut out = Vec::new();
            escape_into(&mut out, s);
            assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string(s).unwrap());
        }
    }

    #[test]
    fn nested_separators() {
        let mut w = JsonWriter::new();
        w.begin_object();
        w.field_str("a", "x");
        w.key("b");
        w.begin_array();
        w.u64(1);
        w.begin_object();
        w.key("c");
        w.null();
        w.end_object();
        w.bool(true);
        w.end_array();
        w.end_object();
        assert_eq!(String::from_utf8(w.into_bytes()).unwrap(), r#"{"a":"x","b":[1,{"c":null},true]}"#);
    }
}
