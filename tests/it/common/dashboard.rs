//! The dashboard under test: `hptune dashboard` started on a free port of a scratch
//! directory's database, plain HTTP requests to it, and waiting for a condition.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::Scratch;

/// A running `hptune dashboard`, stopped when dropped.
pub struct Dashboard {
    child: Child,
    /// Its stdout, kept open: the dashboard goes on printing.
    _stdout: BufReader<std::process::ChildStdout>,
    /// Its address, `http://127.0.0.1:PORT`.
    pub base: String,
}

impl Dashboard {
    /// Starts the dashboard on the scratch directory's database with `args` added.
    pub fn start(scratch: &Scratch, args: &[&str]) -> Self {
        let mut all = vec!["dashboard", "--port", "0"];
        all.extend(args);
        let mut child = scratch
            .command(&all)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("hptune dashboard starts");
        let mut first = String::new();
        let mut stdout = BufReader::new(child.stdout.take().expect("its stdout"));
        stdout
            .read_line(&mut first)
            .expect("the dashboard prints its address");
        let base = first
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no address in {first:?}"))
            .trim_end_matches('/')
            .to_string();
        Dashboard {
            child,
            _stdout: stdout,
            base,
        }
    }

    /// GET `path` with `headers`: (status, headers, body).
    pub fn get(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        get(&format!("{}{path}", self.base), headers)
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: String,
    pub body: String,
}

/// A plain HTTP/1.1 GET of `url` (`http://HOST:PORT/PATH`), with `Host: HOST:PORT` unless
/// `headers` name another.
pub fn get(url: &str, headers: &[(&str, &str)]) -> Response {
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let mut stream = TcpStream::connect(host).expect("the dashboard accepts connections");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut request = format!("GET {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        request.push_str(&format!("Host: {host}\r\n"));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("a response");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head}"));
    let body = match head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        true => unchunk(body),
        false => body.to_string(),
    };
    Response {
        status,
        headers: head.to_string(),
        body,
    }
}

/// The body of a chunked response, joined.
fn unchunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// Waits until `done` holds (checked every 50 ms), failing after a minute with `what`: a
/// guard against a hang, not a measure of speed.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
