//! A loopback HTTP/1.1 server for the client tests: real sockets on 127.0.0.1:0, a script of
//! answers (one per connection), and a record of every request as received.

#![allow(dead_code, clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// One request as the server read it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Header names lowercased, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// What the server does with one connection.
#[derive(Debug, Clone)]
pub enum Answer {
    /// Status, extra headers, body.
    Reply(u16, Vec<(String, String)>, Vec<u8>),
    /// Read the request, then never answer (the socket stays open for a minute).
    Hang,
}

pub fn json(status: u16, body: &str) -> Answer {
    Answer::Reply(status, vec![("content-type".into(), "application/json".into())], body.as_bytes().to_vec())
}

pub struct Server {
    pub base: String,
    pub requests: Arc<Mutex<Vec<Recorded>>>,
}

impl Server {
    /// Serves `script` in order, one answer per connection; a connection past the script gets
    /// a 599 (the tests count requests, so an unexpected one fails them).
    pub fn start(script: Vec<Answer>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let rec = Arc::clone(&requests);
        thread::spawn(move || {
            let mut script = script.into_iter();
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let answer = script.next().unwrap_or_else(|| json(599, "{\"error\":\"unexpected request\"}"));
                let rec = Arc::clone(&rec);
                thread::spawn(move || serve(stream, answer, &rec));
            }
        });
        Server { base, requests }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve(stream: TcpStream, answer: Answer, rec: &Mutex<Vec<Recorded>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
        if let Some((n, v)) = h.trim_end().split_once(':') {
            headers.push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let len: usize = headers.iter().find(|(n, _)| n == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).unwrap();
    rec.lock().unwrap().push(Recorded { method, path, headers, body });
    let mut stream = stream;
    match answer {
        Answer::Hang => thread::sleep(Duration::from_secs(60)),
        Answer::Reply(status, extra, body) => {
            let mut head = format!("HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n", body.len());
            for (n, v) in extra {
                head.push_str(&format!("{n}: {v}\r\n"));
            }
            head.push_str("\r\n");
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
            let _ = stream.flush();
        }
    }
}
