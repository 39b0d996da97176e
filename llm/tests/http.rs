//! The provider clients against a loopback server: exact bytes out, headers, parsing, and
//! every fault the issue names.

mod support;

use std::time::Duration;

use ctxlog::Usage;
use ctxlog_llm::{
    AnthropicClient, ApiKey, ClientOptions, HttpOptions, LlmError, OpenAiClient, Summarizer, SummarizerSpec,
};
use support::{json, Answer, Server};

const KEY: &str = "sk-test-9f8e7d6c5b4a";

fn fast() -> HttpOptions {
    HttpOptions {
        timeout: Duration::from_millis(800),
        connect_timeout: Duration::from_millis(800),
        retry_backoff: Duration::from_millis(10),
        retry_after_cap: Duration::from_millis(50),
    }
}

fn anthropic(server: &Server) -> AnthropicClient {
    AnthropicClient::new(&server.base, ApiKey::new(KEY), Some("claude-x".into()), fast())
}

fn openai(server: &Server, key: Option<&str>) -> OpenAiClient {
    OpenAiClient::new(&server.base, key.map(ApiKey::new), None, fast())
}

/// Odd spacing, key order and escapes: any re-serialization would change these bytes.
const BODY: &[u8] =
    b"{\"z\":1,  \"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"caf\\u00e9 \\/ x\"}],\"a\":1.50}";

const ANTHROPIC_OK: &str = r#"{"model":"claude-x-2","content":[{"type":"thinking","thinking":"hm"},{"type":"text","text":"Part one. "},{"type":"text","text":"Part two."}],"usage":{"input_tokens":12,"cache_creation_input_tokens":100,"cache_read_input_tokens":900,"output_tokens":7}}"#;
const OPENAI_OK: &str = r#"{"model":"llama","choices":[{"message":{"role":"assistant","content":"The summary."}}],"usage":{"prompt_tokens":1000,"completion_tokens":20,"prompt_tokens_details":{"cached_tokens":600}}}"#;

#[test]
fn anthropic_sends_the_bytes_given_with_its_headers_and_parses_text_and_usage() {
    let server = Server::start(vec![json(200, ANTHROPIC_OK)]);
    let done = anthropic(&server).complete(BODY).unwrap();
    assert_eq!(done.text, "Part one. Part two.");
    assert_eq!(done.usage, Some(Usage { input: 12, cache_read: 900, cache_write: 100, output: 7 }));
    assert_eq!(done.model.as_deref(), Some("claude-x-2"));
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/v1/messages"));
    assert_eq!(r.body, BODY);
    assert_eq!(r.header("x-api-key"), Some(KEY));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("authorization"), None);
}

#[test]
fn openai_sends_the_bytes_given_with_a_bearer_and_parses_cached_tokens() {
    let server = Server::start(vec![json(200, OPENAI_OK)]);
    let done = openai(&server, Some(KEY)).complete(BODY).unwrap();
    assert_eq!(done.text, "The summary.");
    assert_eq!(done.usage, Some(Usage { input: 400, cache_read: 600, cache_write: 0, output: 20 }));
    assert_eq!(done.model.as_deref(), Some("llama"));
    let r = &server.requests()[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/v1/chat/completions"));
    assert_eq!(r.body, BODY);
    assert_eq!(r.header("authorization"), Some(format!("Bearer {KEY}").as_str()));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("x-api-key"), None);
}

#[test]
fn openai_without_a_key_sends_no_authorization_and_tolerates_a_v1_base() {
    let server = Server::start(vec![json(200, r#"{"choices":[{"message":{"content":"ok"}}]}"#)]);
    let client = OpenAiClient::new(&format!("{}/v1/", server.base), None, None, fast());
    let done = client.complete(b"{}").unwrap();
    assert_eq!((done.text.as_str(), done.usage, done.model), ("ok", None, None));
    let r = &server.requests()[0];
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(r.header("authorization"), None);
}

#[test]
fn a_429_is_retried_once_honouring_retry_after() {
    let busy = Answer::Reply(429, vec![("retry-after".into(), "0".into())], b"{}".to_vec());
    let server = Server::start(vec![busy, json(200, ANTHROPIC_OK)]);
    assert_eq!(anthropic(&server).complete(BODY).unwrap().text, "Part one. Part two.");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[1].body, BODY, "the retry sends the same bytes");
}

#[test]
fn a_huge_retry_after_is_capped() {
    // Uncapped, this test would sleep an hour; the cap (50 ms) bounds it.
    let busy = Answer::Reply(503, vec![("retry-after".into(), "3600".into())], b"{}".to_vec());
    let server = Server::start(vec![busy, json(200, OPENAI_OK)]);
    assert_eq!(openai(&server, None).complete(BODY).unwrap().text, "The summary.");
}

#[test]
fn a_second_429_is_an_error_after_exactly_one_retry() {
    let server = Server::start(vec![
        json(429, r#"{"error":"slow down"}"#),
        json(429, r#"{"error":"still slow"}"#),
        json(200, OPENAI_OK),
    ]);
    let err = openai(&server, None).complete(BODY).unwrap_err();
    match &err {
        LlmError::Status { code: 429, retried: true, body_excerpt, .. } => assert!(body_excerpt.contains("still slow")),
        other => panic!("{other:?}"),
    }
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn a_5xx_is_retried_once_then_reported() {
    let server = Server::start(vec![json(500, "{}"), json(502, "bad gateway"), json(200, ANTHROPIC_OK)]);
    let err = anthropic(&server).complete(BODY).unwrap_err();
    assert!(matches!(err, LlmError::Status { code: 502, retried: true, .. }), "{err:?}");
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn a_400_is_not_retried() {
    let server =
        Server::start(vec![json(400, r#"{"type":"error","error":{"message":"bad field"}}"#), json(200, ANTHROPIC_OK)]);
    let err = anthropic(&server).complete(BODY).unwrap_err();
    match &err {
        LlmError::Status { code: 400, retried: false, body_excerpt, .. } => assert!(body_excerpt.contains("bad field")),
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("HTTP 400"), "{err}");
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn a_redirect_is_not_followed() {
    let moved = Answer::Reply(307, vec![("location".into(), "/elsewhere".into())], Vec::new());
    let server = Server::start(vec![moved, json(200, OPENAI_OK)]);
    let err = openai(&server, None).complete(BODY).unwrap_err();
    assert!(matches!(err, LlmError::Status { code: 307, retried: false, .. }), "{err:?}");
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn a_server_that_never_answers_is_a_bounded_timeout() {
    let server = Server::start(vec![Answer::Hang, Answer::Hang]);
    let err = anthropic(&server).complete(BODY).unwrap_err();
    assert!(matches!(err, LlmError::Timeout { .. }), "{err:?}");
    assert_eq!(server.requests().len(), 1, "a timeout is not retried");
}

#[test]
fn a_refused_connection_is_a_connect_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let client = OpenAiClient::new(&format!("http://127.0.0.1:{port}"), None, None, fast());
    let err = client.complete(BODY).unwrap_err();
    assert!(matches!(err, LlmError::Connect { .. }), "{err:?}");
}

#[test]
fn a_body_that_is_not_json_is_invalid_json() {
    let server = Server::start(vec![json(200, "<html>proxy error</html>"), json(200, "not json either")]);
    assert!(matches!(anthropic(&server).complete(BODY).unwrap_err(), LlmError::InvalidJson { .. }));
    assert!(matches!(openai(&server, None).complete(BODY).unwrap_err(), LlmError::InvalidJson { .. }));
}

#[test]
fn json_of_the_wrong_shape_names_the_field() {
    let cases: Vec<(&str, bool, &str)> = vec![
        (r#"{"id":"x"}"#, true, "content"),
        (r#"{"content":"text"}"#, true, "content"),
        (r#"{"content":[{"type":"text","text":5}]}"#, true, "content[0].text"),
        (r#"{"content":[{"type":"text","text":"ok"}],"usage":{"output_tokens":3}}"#, true, "input_tokens"),
        (r#"{"id":"x"}"#, false, "choices"),
        (r#"{"choices":[{"message":{"content":["a"]}}]}"#, false, "choices[0].message.content"),
        (
            r#"{"choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":5,"prompt_tokens_details":{"cached_tokens":9}}}"#,
            false,
            "cached_tokens",
        ),
    ];
    for (body, is_anthropic, field) in cases {
        let server = Server::start(vec![json(200, body)]);
        let err = if is_anthropic { anthropic(&server).complete(BODY) } else { openai(&server, None).complete(BODY) }
            .unwrap_err();
        match &err {
            LlmError::InvalidJson { detail, .. } => assert!(detail.contains(field), "{body}: {detail}"),
            other => panic!("{body}: {other:?}"),
        }
    }
}

#[test]
fn an_answer_without_text_is_empty() {
    for body in [
        r#"{"content":[]}"#,
        r#"{"content":[{"type":"text","text":"  \n"}]}"#,
        r#"{"content":[{"type":"tool_use","id":"t"}]}"#,
    ] {
        let server = Server::start(vec![json(200, body)]);
        assert!(matches!(anthropic(&server).complete(BODY), Err(LlmError::Empty { .. })), "{body}");
    }
    for body in [
        r#"{"choices":[]}"#,
        r#"{"choices":[{"message":{"content":""}}]}"#,
        r#"{"choices":[{"message":{"content":null}}]}"#,
    ] {
        let server = Server::start(vec![json(200, body)]);
        assert!(matches!(openai(&server, None).complete(BODY), Err(LlmError::Empty { .. })), "{body}");
    }
}

#[test]
fn the_key_never_shows_even_when_the_server_echoes_it() {
    let echo = format!(r#"{{"error":{{"message":"invalid x-api-key {KEY}"}}}}"#);
    let bad_usage = format!(r#"{{"content":[{{"type":"text","text":"ok"}}],"usage":{{"input_tokens":"{KEY}"}}}}"#);
    let bad_openai = format!(r#"{{"choices":[{{"message":{{"content":"ok"}}}}],"usage":{{"prompt_tokens":"{KEY}"}}}}"#);
    let server = Server::start(vec![json(401, &echo), json(200, &bad_usage), json(401, &echo), json(200, &bad_openai)]);
    let a = anthropic(&server);
    let o = openai(&server, Some(KEY));
    let errors = [
        a.complete(BODY).unwrap_err(),
        a.complete(BODY).unwrap_err(),
        o.complete(BODY).unwrap_err(),
        o.complete(BODY).unwrap_err(),
    ];
    assert!(matches!(errors[0], LlmError::Status { code: 401, .. }));
    assert!(matches!(errors[1], LlmError::InvalidJson { .. }));
    for e in &errors {
        for shown in [format!("{e}"), format!("{e:?}"), format!("{e:#?}")] {
            assert!(!shown.contains(KEY), "{shown}");
        }
        assert!(format!("{e:?}").contains("[REDACTED]"), "{e:?}");
    }
    for shown in
        [format!("{a:?}"), format!("{o:?}"), format!("{:?}", ApiKey::new(KEY)), format!("{}", ApiKey::new(KEY))]
    {
        assert!(!shown.contains(KEY), "{shown}");
    }
}

#[test]
fn a_missing_key_variable_is_refused_before_any_request() {
    let env = "CTXLOG_LLM_TEST_KEY_THAT_IS_NEVER_SET";
    let options = ClientOptions { api_key_env: Some(env.into()), ..ClientOptions::default() };
    for spec in ["anthropic:http://127.0.0.1:9", "openai:http://127.0.0.1:9"] {
        match SummarizerSpec::parse(spec).unwrap().build(&options) {
            Err(LlmError::MissingKey { env: named }) => assert_eq!(named, env),
            other => panic!("{spec}: {:?}", other.map(|_| ())),
        }
    }
}

#[test]
fn a_spec_built_client_reads_the_key_from_the_named_variable() {
    let env = "CTXLOG_LLM_TEST_KEY_SET_BY_THIS_TEST";
    std::env::set_var(env, KEY);
    let server = Server::start(vec![json(200, ANTHROPIC_OK)]);
    let options = ClientOptions { api_key_env: Some(env.into()), model: Some("m1".into()), http: fast() };
    let client = SummarizerSpec::parse(&format!("anthropic:{}", server.base)).unwrap().build(&options).unwrap();
    assert_eq!(client.model(), Some("m1"));
    assert_eq!(client.wire_format(), Some(ctxlog::WireFormat::Anthropic));
    client.complete(BODY).unwrap();
    assert_eq!(server.requests()[0].header("x-api-key"), Some(KEY));
}

#[test]
fn an_answer_cut_at_max_tokens_is_truncated_and_recorded_as_such() {
    let cut = r#"{"content":[{"type":"text","text":"1. User Requests"}],"stop_reason":"max_tokens","usage":{"input_tokens":10,"output_tokens":64}}"#;
    let server = Server::start(vec![json(200, cut)]);
    let err = anthropic(&server).complete(BODY).unwrap_err();
    assert!(matches!(&err, LlmError::Truncated { reason, .. } if reason == "max_tokens"), "{err:?}");
    assert_eq!(err.into_failure().as_str(), "truncated");
    let cut = r#"{"choices":[{"message":{"content":"1. User Requests"},"finish_reason":"length"}]}"#;
    let server = Server::start(vec![json(200, cut)]);
    let err = openai(&server, None).complete(BODY).unwrap_err();
    assert!(matches!(&err, LlmError::Truncated { reason, .. } if reason == "length"), "{err:?}");
    // An answer that ended by itself is a summary.
    let done = r#"{"choices":[{"message":{"content":"The summary."},"finish_reason":"stop"}]}"#;
    let server = Server::start(vec![json(200, done)]);
    assert_eq!(openai(&server, None).complete(BODY).unwrap().text, "The summary.");
}

#[test]
fn a_4xx_is_a_deterministic_rejection_429_and_5xx_are_provider_errors() {
    let llama = r#"{"error":{"code":400,"message":"request (45896 tokens) exceeds the available context size (8192 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":45896,"n_ctx":8192}}"#;
    let server = Server::start(vec![json(400, llama)]);
    let failure = openai(&server, None).complete(BODY).unwrap_err().into_failure();
    match &failure {
        ctxlog::event::SummaryFailure::Rejected { status: 400, detail } => {
            assert!(detail.contains("exceed_context_size_error"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
    let server = Server::start(vec![json(429, "{}"), json(429, "{}")]);
    assert_eq!(openai(&server, None).complete(BODY).unwrap_err().into_failure().as_str(), "provider_error");
    let server = Server::start(vec![json(408, "{}")]);
    assert_eq!(openai(&server, None).complete(BODY).unwrap_err().into_failure().as_str(), "provider_error");
}

#[test]
fn a_llama_cpp_server_states_its_context_at_props() {
    let props = r#"{"default_generation_settings":{"n_ctx":8192,"params":{}},"total_slots":1}"#;
    let server = Server::start(vec![json(200, props)]);
    assert_eq!(openai(&server, None).context_window(), Some(8_192));
    let r = &server.requests()[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("GET", "/props"));
    // A server without the page (OpenAI) says nothing; neither does Anthropic's client.
    let server = Server::start(vec![json(404, r#"{"error":"not found"}"#)]);
    assert_eq!(openai(&server, None).context_window(), None);
    assert_eq!(anthropic(&Server::start(vec![])).context_window(), None);
}
