//! Headless Chromium driven over the DevTools protocol (its websocket): open a page, run
//! JavaScript in it, wait for what it shows, take screenshots.
//!
//! The browser is Debian's `chromium` (`scripts/install-chromium.sh` installs it; or
//! `HPTUNE_CHROMIUM` names one). Where there is none the tests that need it say they are
//! skipped, unless `HPTUNE_TEST_BROWSER=required`, which makes that a failure (CI).

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

/// The browser to drive, or `None` (and a line saying the test is skipped).
pub fn chromium() -> Option<PathBuf> {
    let named = std::env::var("HPTUNE_CHROMIUM")
        .ok()
        .filter(|p| !p.is_empty());
    let found = named.map(PathBuf::from).or_else(|| {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .flat_map(|dir| ["chromium", "chromium-browser"].map(|n| dir.join(n)))
                .find(|p| p.is_file())
        })
    });
    if found.is_none() {
        let required = std::env::var("HPTUNE_TEST_BROWSER").is_ok_and(|v| v == "required");
        assert!(
            !required,
            "HPTUNE_TEST_BROWSER=required but no chromium: run scripts/install-chromium.sh"
        );
        eprintln!("skipped: no chromium (scripts/install-chromium.sh installs Debian's)");
    }
    found
}

/// Where the tests save their screenshots; printed so that a person can look at them.
pub fn screenshot_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/dashboard-screenshots");
    std::fs::create_dir_all(&dir).expect("the screenshot folder");
    dir
}

/// A headless Chromium with one page, closed when dropped.
pub struct Browser {
    child: Child,
    socket: WebSocket<MaybeTlsStream<TcpStream>>,
    session: String,
    next_id: u64,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts `chromium` with a window `width` wide and opens a blank page.
    pub fn start(chromium: &Path, width: u32) -> Self {
        Self::start_with(chromium, width, &[])
    }

    /// [`Browser::start`] with the command-line switches `switches` added.
    pub fn start_with(chromium: &Path, width: u32, switches: &[&str]) -> Self {
        let profile = tempfile::tempdir().unwrap();
        let mut child = Command::new(chromium)
            .args(switches)
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                "--no-first-run",
                "--remote-debugging-port=0",
                &format!("--window-size={width},1000"),
                &format!("--user-data-dir={}", profile.path().display()),
                "about:blank",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("chromium starts");
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let url = stderr
            .lines()
            .map_while(Result::ok)
            .find_map(|line| {
                line.split("DevTools listening on ")
                    .nth(1)
                    .map(str::to_string)
            })
            .expect("chromium prints its DevTools address");
        let (socket, _) = tungstenite::connect(url.trim()).expect("the DevTools websocket");
        let mut browser = Browser {
            child,
            socket,
            session: String::new(),
            next_id: 0,
            _profile: profile,
        };
        let target = browser.call("Target.createTarget", json!({"url": "about:blank"}));
        let target_id = target["targetId"].as_str().unwrap().to_string();
        let attached = browser.call(
            "Target.attachToTarget",
            json!({"targetId": target_id, "flatten": true}),
        );
        browser.session = attached["sessionId"].as_str().unwrap().to_string();
        browser.call("Page.enable", json!({}));
        browser
    }

    /// Sends one DevTools command (to the page, once attached) and returns its result.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.try_call(method, params)
            .unwrap_or_else(|reply| panic!("{method}: {reply}"))
    }

    /// Sends DevTools command `method` and returns its result, or the whole reply when it is
    /// an error.
    fn try_call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if !self.session.is_empty() {
            message["sessionId"] = json!(self.session);
        }
        self.socket
            .send(Message::Text(message.to_string().into()))
            .expect("a DevTools command is sent");
        loop {
            let Message::Text(text) = self.socket.read().expect("a DevTools message") else {
                continue;
            };
            let reply: Value = serde_json::from_str(text.as_str()).expect("DevTools speaks JSON");
            if reply["id"] == json!(id) {
                return match reply.get("error") {
                    Some(_) => Err(reply),
                    None => Ok(reply["result"].clone()),
                };
            }
        }
    }

    /// Opens `url` and waits for its document and scripts to have loaded.
    pub fn open(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url}));
        self.wait_for(
            &format!("{url} to load"),
            "document.readyState === 'complete' && location.href !== 'about:blank'",
        );
    }

    /// The value of JavaScript `expression` in the page (promises awaited).
    pub fn eval(&mut self, expression: &str) -> Value {
        self.try_eval(expression)
            .unwrap_or_else(|reply| panic!("Runtime.evaluate: {reply}"))
    }

    /// [`Browser::eval`], or DevTools' error reply (as when the page navigates meanwhile).
    fn try_eval(&mut self, expression: &str) -> Result<Value, Value> {
        let result = self.try_call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        )?;
        assert!(
            result.get("exceptionDetails").is_none(),
            "{expression}: {}",
            result["exceptionDetails"]
        );
        Ok(result["result"]["value"].clone())
    }

    /// Waits until JavaScript `condition` is true in the page (checked every 50 ms; after a
    /// minute the test fails saying `what`: a guard against a hang, not a timing). A check
    /// that meets the page navigating (a reload the test waits for) is a "not yet".
    pub fn wait_for(&mut self, what: &str, condition: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match self.try_eval(&format!("!!({condition})")) {
                Ok(Value::Bool(true)) => return,
                Ok(_) => {}
                Err(reply) if navigating(&reply) => {}
                Err(reply) => panic!("Runtime.evaluate: {reply}"),
            }
            assert!(Instant::now() < deadline, "gave up waiting for {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Saves the whole page as a PNG named `name` in [`screenshot_dir`]; returns its path.
    pub fn screenshot(&mut self, name: &str) -> PathBuf {
        let height = self
            .eval("document.documentElement.scrollHeight")
            .as_f64()
            .unwrap_or(1000.0);
        let width = self.eval("window.innerWidth").as_f64().unwrap_or(1400.0);
        let shot = self.call(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": true,
                   "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}}),
        );
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        let path = screenshot_dir().join(name);
        std::fs::write(&path, png).unwrap();
        eprintln!("screenshot: {}", path.display());
        path
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether DevTools' error `reply` says the page went away under the command: it navigated
/// (or reloaded) and the document the command was for is gone.
fn navigating(reply: &Value) -> bool {
    let message = reply["error"]["message"].as_str().unwrap_or_default();
    [
        "navigated or closed",
        "context was destroyed",
        "Cannot find context",
    ]
    .iter()
    .any(|sign| message.contains(sign))
}
