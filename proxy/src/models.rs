//! Context windows by model: the budget of a session the proxy creates when `--budget` is not
//! given. A request's `model` is matched by the longest table key it starts with (so dated and
//! suffixed names, `claude-sonnet-4-5-20250929`, `gpt-4o-2024-08-06`, find their family). The
//! budget is the window less the output the creating request reserves (`max_tokens`, at most
//! half the window): a provider refuses a prompt whose input and `max_tokens` exceed the window.

use std::collections::BTreeMap;

/// Context windows (input + output tokens) as the providers document them.
const WINDOWS: [(&str, u64); 29] = [
    // Anthropic: 200k for every current model (Sonnet's 1M is a beta header away).
    ("claude-", 200_000),
    ("claude-2.0", 100_000),
    ("claude-instant", 100_000),
    // OpenAI.
    ("gpt-3.5-turbo", 16_385),
    ("gpt-4", 8_192),
    ("gpt-4-32k", 32_768),
    ("gpt-4-turbo", 128_000),
    ("gpt-4-1106", 128_000),
    ("gpt-4-0125", 128_000),
    ("gpt-4o", 128_000),
    ("chatgpt-4o", 128_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4.5", 128_000),
    ("gpt-5", 400_000),
    ("gpt-5-chat", 128_000),
    ("o1", 200_000),
    ("o1-mini", 128_000),
    ("o1-preview", 128_000),
    ("o3", 200_000),
    ("o3-mini", 200_000),
    ("o4-mini", 200_000),
    ("gpt-oss", 131_072),
    ("codex-mini", 200_000),
    // Google: 1M tokens for every current Gemini (2.0, 2.5, 3), 2M for 1.5 Pro.
    ("gemini-", 1_048_576),
    ("gemini-1.5-pro", 2_097_152),
    // Open models as served by vLLM, Ollama or llama.cpp under their usual names.
    ("llama-3.1", 131_072),
    ("llama-3.3", 131_072),
    ("qwen2.5", 32_768),
    ("mistral-large", 131_072),
];

/// The table: the built-in windows, then a file's and the flags' entries over them.
#[derive(Debug, Clone)]
pub struct Models {
    windows: BTreeMap<String, u64>,
}

impl Default for Models {
    fn default() -> Self {
        Models { windows: WINDOWS.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect() }
    }
}

/// A models file or entry that does not read.
#[derive(Debug, thiserror::Error)]
#[error("{source_name}: {message}")]
pub struct ModelsError {
    /// The file, or the flag.
    pub source_name: String,
    /// What is wrong.
    pub message: String,
}

impl Models {
    /// Adds or replaces the window of models starting with `prefix`.
    pub fn set(&mut self, prefix: &str, window: u64) {
        self.windows.insert(prefix.to_owned(), window);
    }

    /// Reads a JSON object of `"model prefix": window` (`{"my-finetune": 32768}`) over the table.
    pub fn load_json(&mut self, name: &str, text: &str) -> Result<(), ModelsError> {
        let err = |message: String| ModelsError { source_name: name.to_owned(), message };
        let map: BTreeMap<String, serde_json::Value> =
            serde_json::from_str(text).map_err(|e| err(format!("expected a JSON object of model: tokens ({e})")))?;
        for (k, v) in map {
            match v.as_u64().filter(|n| *n > 0) {
                Some(n) => self.set(&k, n),
                None => return Err(err(format!("{k:?}: the window must be a positive number of tokens, not {v}"))),
            }
        }
        Ok(())
    }

    /// The window of `model`: the entry of the longest prefix it starts with.
    pub fn window(&self, model: &str) -> Option<u64> {
        self.windows.iter().filter(|(k, _)| model.starts_with(k.as_str())).max_by_key(|(k, _)| k.len()).map(|(_, v)| *v)
    }

    /// The budget of a session created for `model` by a request reserving `max_tokens` of
    /// output; `None` when the model is not in the table.
    pub fn budget(&self, model: &str, max_tokens: Option<u64>) -> Option<u64> {
        let window = self.window(model)?;
        Some(window - max_tokens.unwrap_or(0).min(window / 2))
    }

    /// The entries, for `--help` and the README.
    pub fn entries(&self) -> impl Iterator<Item = (&str, u64)> {
        self.windows.iter().map(|(k, v)| (k.as_str(), *v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_prefix_wins_and_output_is_reserved() {
        let m = Models::default();
        assert_eq!(m.window("claude-sonnet-4-5-20250929"), Some(200_000));
        assert_eq!(m.window("gpt-4o-mini-2024-07-18"), Some(128_000));
        assert_eq!(m.window("gpt-4.1-nano"), Some(1_047_576));
        assert_eq!(m.window("gpt-4-0613"), Some(8_192));
        assert_eq!(m.window("o3-mini-2025-01-31"), Some(200_000));
        assert_eq!(m.window("o1-mini"), Some(128_000));
        assert_eq!(m.window("gemini-2.5-flash"), Some(1_048_576), "the model from a Gemini path");
        assert_eq!(m.window("gemini-1.5-pro-002"), Some(2_097_152));
        assert_eq!(m.window("unknown-model"), None);
        assert_eq!(m.budget("claude-opus-4-1", Some(8_192)), Some(191_808));
        assert_eq!(m.budget("gpt-4", Some(100_000)), Some(4_096), "at most half the window is reserved");
        let mut m = m;
        m.load_json("models.json", r#"{"claude-":150000,"my-llama":8192}"#).unwrap_or_default();
        assert_eq!(m.window("claude-haiku-4-5"), Some(150_000));
        assert_eq!(m.window("my-llama-8b"), Some(8_192));
        assert!(m.load_json("bad.json", r#"{"x":-1}"#).is_err());
        assert!(m.load_json("bad.json", "[1]").is_err());
    }
}
