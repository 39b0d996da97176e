//! What a rerun could not take over as recorded (summaries re-made, restores skipped, usage
//! scaled): `rerun` collects it, the diff prints it.

use serde_json::{json, Value};

/// What the rerun could not take over as recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Notes {
    /// Recorded summaries reused.
    pub summaries_reused: usize,
    /// Summaries re-made by the built-in summarizer: `(from, to, condensed)`.
    pub summaries_remade: Vec<(u64, u64, bool)>,
    /// Restores with nothing to restore in the rerun.
    pub restores_skipped: Vec<u64>,
    /// Calls whose reported usage was scaled to a different view.
    pub usage_scaled: usize,
}

impl Notes {
    /// As JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "summaries_reused": self.summaries_reused,
            "summaries_remade": self.summaries_remade.iter()
                .map(|(from, to, condensed)| json!({"from": from, "to": to, "condensed": condensed})).collect::<Vec<_>>(),
            "restores_skipped": self.restores_skipped,
            "usage_scaled": self.usage_scaled,
        })
    }

    /// For people: one line each, nothing when there is nothing to say.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        let remade = &self.summaries_remade;
        if self.summaries_reused > 0 || !remade.is_empty() {
            let mut line = format!(
                "summaries: {} recorded reused, {} re-made by the built-in summarizer",
                self.summaries_reused,
                remade.len()
            );
            if !remade.is_empty() {
                let spans: Vec<String> = remade
                    .iter()
                    .take(8)
                    .map(|(f, t, c)| format!("{}{f}–{}", if *c { "condensed " } else { "" }, t.saturating_sub(1)))
                    .collect();
                let more = if remade.len() > 8 { format!(", … {} more", remade.len() - 8) } else { String::new() };
                line.push_str(&format!(" (seq {}{more})", spans.join(", ")));
            }
            out.push(line);
        }
        if !self.restores_skipped.is_empty() {
            let seqs: Vec<String> = self.restores_skipped.iter().map(ToString::to_string).collect();
            out.push(format!("restores skipped (nothing to restore in the rerun): seq {}", seqs.join(", ")));
        }
        if self.usage_scaled > 0 {
            out.push(format!(
                "reported usage scaled to the rerun's view on {} call(s) whose view differs from the recorded one",
                self.usage_scaled
            ));
        }
        out
    }
}
