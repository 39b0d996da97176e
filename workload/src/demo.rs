//! The bundled demo: one fixed seed and length, the session `ctxlog demo` runs and the timeline
//! snapshot pins.

use crate::session::Lines;

/// Seed used by [`demo_transcript`].
pub const DEMO_SEED: u64 = 0x6F72_615F_6465_6D6F; // "ora_demo"

/// Tool-calling turns of [`demo_transcript`].
pub const DEMO_TURNS: usize = 250;

/// The bundled demo transcript: JSON Lines, `\n`-terminated, identical on every call.
///
/// 543 messages (~1.7 MB): a ~24k-char system prompt, the user's
/// instructions, ~250 tool-calling turns, periodic human follow-ups (two with
/// PNG screenshots) and a final text-only assistant reply.
pub fn demo_transcript() -> String {
    generate(DEMO_SEED, DEMO_TURNS)
}

/// A transcript with `turns` tool-calling turns from `seed`, as one JSONL text.
///
/// Same shape as [`demo_transcript`], scaled. Always contains the system prompt, the
/// instructions and a final assistant reply; the two screenshots appear once the session is
/// long enough to have human follow-ups after 30% and 70% of the turns (about 30 turns or
/// more). For a given number of messages, streamed, use [`crate::session`].
pub fn generate(seed: u64, turns: usize) -> String {
    Lines::turns(seed, turns).into_jsonl()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::{check_pairing, humans, images, parse, result_quantiles, text_of, tool_results};
    use crate::png::{check_png, crc32};
    use crate::session::START_UNIX;
    use crate::sizes::MAX_RESULT;
    use crate::time::unix_of;
    use serde_json::Value;
    use sha2::Digest as _;

    #[test]
    fn deterministic() {
        let a = demo_transcript();
        assert_eq!(a, demo_transcript());
        assert_ne!(a, generate(DEMO_SEED ^ 1, DEMO_TURNS));
    }

    /// Golden fingerprint: the demo is bundled and compared across machines, so
    /// any byte change (PRNG, templates, or a different flate2 backend chosen
    /// via feature unification) must be deliberate. Update the numbers when
    /// changing the generator on purpose (and expect the demo timeline snapshot to move).
    #[test]
    fn golden_fingerprint() {
        let t = demo_transcript();
        assert_eq!((t.len(), crc32(&[t.as_bytes()])), (1_683_866, 0x92C2_4640));
        let sha = sha2::Sha256::digest(t.as_bytes());
        let hex: String = sha.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "605d04cd6eee01b39dbe11095a2b3b7e414819ff11fe703171868fc18c92fe22");
    }

    #[test]
    fn shape_and_fields() {
        let t = demo_transcript();
        assert!(t.len() < 4_000_000, "{} bytes", t.len());
        let v = parse(&t);
        assert!((450..=650).contains(&v.len()), "{} lines", v.len());
        for m in &v {
            let obj = m.as_object().unwrap();
            assert_eq!(obj.len(), 3);
            assert!(["system", "user", "assistant"].contains(&m["role"].as_str().unwrap()));
            assert!(m["timestamp"].is_string());
            match &m["content"] {
                Value::String(s) => assert!(!s.is_empty()),
                Value::Array(bs) => {
                    assert!(!bs.is_empty());
                    for b in bs {
                        match b["type"].as_str().unwrap() {
                            "text" => assert!(b["text"].is_string()),
                            "image" => assert!(b["source"]["data"].is_string()),
                            "thinking" => {
                                assert_eq!(m["role"], "assistant");
                                assert!(b["thinking"].is_string());
                                assert_eq!(b["signature"].as_str().unwrap().len(), 100);
                            }
                            "tool_use" => {
                                assert_eq!(m["role"], "assistant");
                                let id = b["id"].as_str().unwrap();
                                assert!(id.starts_with("toolu_") && id.len() == 30);
                                assert!(id[6..].bytes().all(|c| c.is_ascii_alphanumeric()));
                                let name = b["name"].as_str().unwrap();
                                assert!(["read_file", "grep", "run_command", "write_file", "list_dir", "web_search"]
                                    .contains(&name));
                                assert!(b["input"].is_object());
                            }
                            "tool_result" => {
                                assert_eq!(m["role"], "user");
                                assert!(b["tool_use_id"].is_string());
                                assert!(b["content"].is_string() || b["content"].is_array());
                                assert!(b.get("is_error").is_none_or(|e| e == true));
                            }
                            other => panic!("unexpected block type {other}"),
                        }
                    }
                }
                other => panic!("bad content {other}"),
            }
        }
        assert_eq!(v[0]["role"], "system");
        let sys = v[0]["content"].as_str().unwrap();
        assert!((23_000..=26_000).contains(&sys.len()), "{}", sys.len());
        assert_eq!(v[1]["role"], "user");
        assert!(v[1]["content"].as_str().unwrap().contains("PROJECT PATH IS ~/Desktop/ora"));
        let last = v.last().unwrap();
        assert_eq!(last["role"], "assistant");
        assert!(last["content"].as_array().unwrap().iter().all(|b| b["type"] == "text"));
        assert!(v[2..].iter().all(|m| m["role"] != "system"));
    }

    #[test]
    fn tool_use_result_pairing() {
        check_pairing(&parse(&demo_transcript()));
        check_pairing(&parse(&generate(7, 40)));
    }

    #[test]
    fn tool_result_sizes_follow_distribution() {
        let v = parse(&demo_transcript());
        let (p50, p90, p99, max) = result_quantiles(&v);
        assert!((250..=800).contains(&p50), "p50={p50}");
        assert!((3_000..=15_000).contains(&p90), "p90={p90}");
        assert!((15_000..=50_000).contains(&p99), "p99={p99}");
        assert!(max <= MAX_RESULT);
        assert!(tool_results(&v).iter().all(|(_, t)| !t.is_empty()));
        // No degenerate filler: large results are made of many distinct lines.
        for (_, t) in tool_results(&v).iter().filter(|(_, t)| t.len() > 10_000) {
            let distinct: std::collections::BTreeSet<&str> = t.lines().collect();
            assert!(distinct.len() > 30);
        }
    }

    #[test]
    fn two_valid_png_screenshots() {
        let imgs = images(&parse(&demo_transcript()));
        let dims: Vec<(u32, u32)> = imgs.iter().map(|png| check_png(png)).collect();
        assert!(imgs.iter().all(|png| png.len() > 2_000 && png.len() < 400_000));
        assert_eq!(dims, [(1440, 900), (1280, 720)]);
    }

    #[test]
    fn timestamps_and_breaks() {
        let v = parse(&demo_transcript());
        let ts: Vec<u64> = v.iter().map(|m| unix_of(m["timestamp"].as_str().unwrap())).collect();
        assert_eq!(ts[0], START_UNIX);
        assert!(ts.windows(2).all(|w| w[0] <= w[1]));
        let breaks = ts.windows(2).filter(|w| w[1] - w[0] >= 360).count();
        assert!(breaks >= 5, "{breaks} breaks");
        assert!(ts.windows(2).all(|w| w[1] - w[0] <= 1500));
    }

    #[test]
    fn human_messages() {
        let v = parse(&demo_transcript());
        let humans = humans(&v);
        assert!(humans.len() >= 15, "{}", humans.len());
        let mut long = 0;
        for &h in &humans {
            let text = text_of(&v[h]);
            assert!(text.len() >= 50, "{text}");
            assert!(text.len() <= 1_500 || text.contains("```"), "{}", text.len());
            if text.len() > 5_000 {
                long += 1;
                assert!(text.len() <= 7_000);
            }
        }
        assert_eq!(long, 1);
    }

    #[test]
    fn bigger_sessions_scale() {
        let t = generate(42, 1_000);
        let v = parse(&t);
        assert!(v.len() > 2_000);
        check_pairing(&v);
        assert_eq!(images(&v).len(), 2);
    }
}
