//! `hptune-trainer serve` driven as a managed service drives it: a real server process on
//! loopback, a real HTTP client, the tiny model fine-tuned first by the binary itself. The
//! answers must be `predict`'s numbers; every bad request a 4xx that says why, after which
//! the server still serves; SIGTERM must not lose a request it accepted.
#![cfg(feature = "flex")]

use crate::common::fixtures;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn trainer() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hptune-trainer"));
    for name in [
        "HPTUNE_METRICS_FILE",
        "CLOUD_ML_HP_METRIC_FILE",
        "HPTUNE_OUTPUT_DIR",
    ] {
        command.env_remove(name);
    }
    for name in [
        "AIP_HTTP_PORT",
        "AIP_PREDICT_ROUTE",
        "AIP_HEALTH_ROUTE",
        "SAGEMAKER_BIND_TO_PORT",
    ] {
        command.env_remove(name);
    }
    command
}

/// The tiny model fine-tuned for one epoch into `dir`, saved by way of HPTUNE_OUTPUT_DIR as
/// under hptune.
fn fine_tuned(dir: &Path) -> PathBuf {
    let out = dir.join("model");
    let data = fixtures().join("data");
    let output = trainer()
        .args(["--model", fixtures().join("tiny-bert").to_str().unwrap()])
        .args(["--train", data.join("train.tsv").to_str().unwrap()])
        .args(["--eval", data.join("eval.tsv").to_str().unwrap()])
        .args(["--epochs", "1", "--learning-rate", "0.003"])
        .env("HPTUNE_OUTPUT_DIR", &out)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        out.join("model.safetensors").is_file(),
        "HPTUNE_OUTPUT_DIR holds the model"
    );
    out
}

/// A running server, killed when dropped.
struct Server {
    child: Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `serve` on `model` with Vertex AI's variables and waits until its health route
/// answers 200.
async fn start(model: &Path, extra: &[&str]) -> Server {
    start_logging(model, extra, Stdio::inherit()).await
}

/// As [`start`], its log (debug lines of the batcher included) to `log`.
async fn start_logging(model: &Path, extra: &[&str], log: Stdio) -> Server {
    let port = free_port();
    let child = trainer()
        .args([
            "serve",
            "--model-dir",
            model.to_str().unwrap(),
            "--host",
            "127.0.0.1",
        ])
        .args(extra)
        .env("AIP_HTTP_PORT", port.to_string())
        .env(
            "AIP_PREDICT_ROUTE",
            "/v1/endpoints/e/deployedModels/m:predict",
        )
        .env("AIP_HEALTH_ROUTE", "/v1/endpoints/e/deployedModels/m")
        .env(
            "HPTUNE_TRAINER_LOG",
            "info,hptune_trainer::serve::batcher=debug",
        )
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let server = Server {
        child,
        base: format!("http://127.0.0.1:{port}"),
    };
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let health = client
            .get(format!("{}/v1/endpoints/e/deployedModels/m", server.base))
            .send()
            .await;
        if health.is_ok_and(|r| r.status() == 200) {
            return server;
        }
        assert!(Instant::now() < deadline, "the server never became healthy");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const VERTEX: &str = "/v1/endpoints/e/deployedModels/m:predict";

fn predict(model: &Path, texts: &[&str]) -> Vec<Value> {
    let output = trainer()
        .args(["predict", "--model-dir", model.to_str().unwrap()])
        .args(texts)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

async fn post(base: &str, route: &str, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{base}{route}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test]
async fn both_services_routes_answer_with_predicts_labels_and_scores() {
    let dir = tempfile::tempdir().unwrap();
    let model = fine_tuned(dir.path());
    // The last is longer than --max-seq-len: truncated, by both, as documented.
    let long = "cat the weather mat on ".repeat(200);
    let texts = [
        "desperate not nobody",
        "cat the weather mat on on weather",
        "a",
        "",
        long.as_str(),
    ];
    let expected = predict(&model, &texts);
    let server = start(&model, &[]).await;
    let client = reqwest::Client::new();
    assert_eq!(
        client
            .get(format!("{}/ping", server.base))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    let (status, vertex) = post(&server.base, VERTEX, json!({"instances": texts})).await;
    assert_eq!(status, 200, "{vertex}");
    let (status, sagemaker) = post(&server.base, "/invocations", json!({"instances": texts})).await;
    assert_eq!(status, 200, "{sagemaker}");
    let csv_body: String = texts.iter().map(|t| format!("\"{t}\"\n")).collect();
    let csv = client
        .post(format!("{}/invocations", server.base))
        .header("content-type", "text/csv")
        .body(csv_body)
        .send()
        .await
        .unwrap();
    assert_eq!(csv.status(), 200);
    let csv: Value = csv.json().await.unwrap();
    for answer in [&vertex, &sagemaker, &csv] {
        let predictions = answer["predictions"].as_array().unwrap();
        assert_eq!(
            predictions.len(),
            texts.len(),
            "one prediction per instance"
        );
        for (got, want) in predictions.iter().zip(&expected) {
            assert_eq!(got["label"], want["label"], "{got} against {want}");
            let score = got["score"].as_f64().unwrap();
            let probability = want["probabilities"][got["label"].as_str().unwrap()]
                .as_f64()
                .unwrap();
            assert!(
                (score - probability).abs() < 1e-5,
                "{score} against predict's {probability}"
            );
        }
    }

    // Every label, best first, with top_k: null; the first two with top_k: 2.
    let (_, all) = post(
        &server.base,
        VERTEX,
        json!({"instances": [texts[0]], "parameters": {"top_k": null}}),
    )
    .await;
    let ranked = all["predictions"][0].as_array().unwrap();
    let probabilities = expected[0]["probabilities"].as_object().unwrap();
    assert_eq!(ranked.len(), probabilities.len());
    for pair in ranked.windows(2) {
        assert!(pair[0]["score"].as_f64() >= pair[1]["score"].as_f64());
    }
    for entry in ranked {
        let want = probabilities[entry["label"].as_str().unwrap()]
            .as_f64()
            .unwrap();
        assert!((entry["score"].as_f64().unwrap() - want).abs() < 1e-5);
    }
    let (_, two) = post(
        &server.base,
        VERTEX,
        json!({"inputs": texts[0], "parameters": {"top_k": 2}}),
    )
    .await;
    assert_eq!(two["predictions"][0].as_array().unwrap()[..], ranked[..2]);

    // A text pair is classified as the pair.
    let (status, pair) = post(
        &server.base,
        "/invocations",
        json!({"instances": [{"text": "a", "text_pair": "b"}]}),
    )
    .await;
    assert_eq!(status, 200, "{pair}");
}

#[tokio::test]
async fn every_bad_request_gets_a_4xx_that_says_why_and_the_server_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let model = fine_tuned(dir.path());
    let server = start(
        &model,
        &["--max-body-bytes", "2000", "--max-instances", "8"],
    )
    .await;
    let client = reqwest::Client::new();
    let raw = |route: &str, content_type: &str, body: Vec<u8>| {
        client
            .post(format!("{}{route}", server.base))
            .header("content-type", content_type)
            .body(body)
    };
    let json_type = "application/json";
    let cases: Vec<(reqwest::RequestBuilder, u16, &str)> = vec![
        (
            raw(VERTEX, json_type, b"{\"instances\": [".to_vec()),
            400,
            "the body is not valid JSON",
        ),
        (
            raw(VERTEX, json_type, b"".to_vec()),
            400,
            "the body is empty",
        ),
        (
            raw(VERTEX, json_type, b"{}".to_vec()),
            400,
            "the body has no \"instances\"",
        ),
        (
            raw(VERTEX, json_type, b"{\"instances\": []}".to_vec()),
            400,
            "instances: the list is empty",
        ),
        (
            raw(VERTEX, json_type, b"{\"instances\": [\"a\", 7]}".to_vec()),
            400,
            "instances[1]: must be a string",
        ),
        (
            raw(
                VERTEX,
                json_type,
                b"{\"instances\": [{\"text\": null}]}".to_vec(),
            ),
            400,
            "instances[0].text: must be a string",
        ),
        (
            raw(
                VERTEX,
                json_type,
                b"{\"instances\": [\"a\"], \"parameters\": {\"top_k\": 0}}".to_vec(),
            ),
            400,
            "parameters.top_k",
        ),
        (
            raw(
                "/invocations",
                json_type,
                serde_json::to_vec(&json!({"instances": vec!["a"; 9]})).unwrap(),
            ),
            400,
            "more than 8 inputs in one request: at most 8",
        ),
        (
            raw(
                "/invocations",
                json_type,
                serde_json::to_vec(&json!({"instances": ["x".repeat(3000)]})).unwrap(),
            ),
            413,
            "the body is over 2000 bytes",
        ),
        (
            raw("/invocations", "text/csv", b"a,b,c\n".to_vec()),
            400,
            "CSV row 1: 3 columns",
        ),
        (
            raw("/invocations", "text/csv", Vec::new()),
            400,
            "the CSV body has no rows",
        ),
        (
            raw("/invocations", "application/xml", b"<a/>".to_vec()),
            415,
            "content type 'application/xml' is not served",
        ),
        (
            raw(VERTEX, json_type, vec![0xff, 0xfe]),
            400,
            "the body is not valid JSON",
        ),
        (
            client.get(format!("{}/invocations", server.base)),
            405,
            "wrong method",
        ),
        (
            client.post(format!("{}/nowhere", server.base)),
            404,
            "no such route",
        ),
    ];
    for (request, status, message) in cases {
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), status, "{message}");
        let body: Value = response.json().await.unwrap();
        let error = body["error"].as_str().unwrap_or_default();
        assert!(
            error.starts_with(message),
            "expected '{message}...', got {body}"
        );
        // And the server still answers a good request.
        let (ok, answer) = post(&server.base, VERTEX, json!({"instances": ["a good one"]})).await;
        assert_eq!(ok, 200, "{answer}");
    }
}

#[tokio::test]
async fn sigterm_during_a_burst_answers_every_request_it_accepted_then_exits() {
    let dir = tempfile::tempdir().unwrap();
    let model = fine_tuned(dir.path());
    // Requests wait up to 300 ms to share a batch: those received before SIGTERM, 20 ms into
    // the burst, are still in flight when it comes.
    let mut server = start(
        &model,
        &["--max-batch-size", "4096", "--max-batch-wait-ms", "300"],
    )
    .await;
    let client = reqwest::Client::new();
    let texts: Vec<String> = (0..16)
        .map(|i| format!("cat the weather {i} mat on"))
        .collect();
    let burst: Vec<_> = (0..64)
        .map(|i| {
            let request = client
                .post(format!("{}{VERTEX}", server.base))
                .json(&json!({"instances": texts}));
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(i)).await;
                request.send().await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(20)).await;
    nix_kill(server.child.id());
    let mut answered = 0;
    let mut refused = 0;
    for task in burst {
        match task.await.unwrap() {
            Ok(response) => {
                // Accepted: answered in full, never cut off or failed.
                assert_eq!(response.status(), 200);
                let body: Value = response.json().await.unwrap();
                assert_eq!(body["predictions"].as_array().unwrap().len(), texts.len());
                answered += 1;
            }
            // Sent after the server stopped listening: refused, never accepted.
            Err(e) => {
                assert!(e.is_connect() || e.is_request(), "{e:?}");
                refused += 1;
            }
        }
    }
    assert!(answered > 0, "some requests came in before SIGTERM");
    assert!(refused > 0, "some came after it, and were refused");
    let status = server.child.wait().unwrap();
    assert!(
        status.success(),
        "serve exits 0 after SIGTERM: {status:?} ({answered} answered, {refused} refused)"
    );
}

/// Sends SIGTERM to `pid`, as both services stop a container.
fn nix_kill(pid: u32) {
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// The port of a server's base address.
fn address(server: &Server) -> String {
    server.base.trim_start_matches("http://").to_string()
}

/// Connections that send part of a request and then nothing: `headers_only` of them stop in
/// the middle of the headers, the others in the middle of a body.
fn half_open(server: &Server, count: usize, headers_only: bool) -> Vec<TcpStream> {
    (0..count)
        .map(|_| {
            let mut stream = TcpStream::connect(address(server)).unwrap();
            let partial: &[u8] = match headers_only {
                true => b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Ty",
                false => b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"instances\": [",
            };
            stream.write_all(partial).unwrap();
            stream
        })
        .collect()
}

/// Whether the server closed `stream` (after answering or not) by `deadline`; `false` if it
/// is still open then.
fn closed_by_the_server(mut stream: &TcpStream, deadline: Instant) -> bool {
    let left = deadline.saturating_duration_since(Instant::now());
    stream
        .set_read_timeout(Some(left.max(Duration::from_millis(1))))
        .unwrap();
    let mut rest = Vec::new();
    match stream.read_to_end(&mut rest) {
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

#[tokio::test]
async fn half_open_connections_are_closed_and_do_not_hold_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let model = fine_tuned(dir.path());
    let server = start(&model, &[]).await;
    // More than the connection cap (256): those beyond it wait to be accepted until the
    // first are closed by the read timeout (10 s).
    let mut stalled = half_open(&server, 200, true);
    stalled.extend(half_open(&server, 100, false));
    let (status, answer) = post(&server.base, VERTEX, json!({"instances": ["a good one"]})).await;
    assert_eq!(status, 200, "{answer}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let blocking = tokio::task::spawn_blocking(move || {
        stalled
            .iter()
            .filter(|stream| !closed_by_the_server(stream, deadline))
            .count()
    });
    assert_eq!(
        blocking.await.unwrap(),
        0,
        "connections still open a minute after they stopped sending"
    );
    let (status, answer) = post(&server.base, VERTEX, json!({"instances": ["and after"]})).await;
    assert_eq!(status, 200, "{answer}");
}

#[tokio::test]
async fn sigterm_with_stalled_clients_connected_exits_within_the_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    let model = fine_tuned(dir.path());
    let mut server = start(&model, &[]).await;
    let mut stalled = half_open(&server, 25, true);
    stalled.extend(half_open(&server, 25, false));
    nix_kill(server.child.id());
    // The read timeout (10 s) ends the stalled requests, the grace period (20 s) bounds the
    // rest: a minute is a hang.
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "serve still runs a minute after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(status.success(), "{status:?}");
    drop(stalled);
}

/// A JSON request of `count` texts.
fn texts(count: usize) -> Value {
    let texts: Vec<String> = (0..count)
        .map(|i| format!("cat the weather {i} mat on"))
        .collect();
    json!({ "instances": texts })
}

#[tokio::test]
async fn the_requests_of_clients_that_have_gone_are_not_computed() {
    let dir = tempfile::tempdir().unwrap();
    let model = fine_tuned(dir.path());
    let log = dir.path().join("serve.log");
    let server = start_logging(
        &model,
        &["--max-batch-size", "1"],
        std::fs::File::create(&log).unwrap().into(),
    )
    .await;
    // Four requests of 1024 texts, each a forward pass a text; their clients go away once the
    // model is computing the first.
    let body = serde_json::to_vec(&texts(1024)).unwrap();
    let abandoned: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut stream = TcpStream::connect(address(&server)).unwrap();
            let head = format!(
                "POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            stream.write_all(head.as_bytes()).unwrap();
            stream.write_all(&body).unwrap();
            stream
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&log)
        .unwrap()
        .contains("forward pass: ")
    {
        assert!(
            Instant::now() < deadline,
            "the model never started computing"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(abandoned);
    let (status, answer) = post(&server.base, VERTEX, json!({"instances": ["a"]})).await;
    assert_eq!(status, 200, "{answer}");
    drop(server);
    let log = std::fs::read_to_string(&log).unwrap();
    let computed: usize = log
        .lines()
        .filter_map(|line| line.split("forward pass: ").nth(1))
        .map(|rest| rest.split(' ').next().unwrap().parse::<usize>().unwrap())
        .sum();
    assert!(
        computed < 1024,
        "{computed} inputs computed before the one asked for: the abandoned requests were\n{log}"
    );
}

#[tokio::test]
async fn a_full_queue_answers_503_with_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    let model = fine_tuned(dir.path());
    // A forward pass a text: the first requests keep the model busy while the others queue.
    let server = start(&model, &["--max-batch-size", "1"]).await;
    let client = reqwest::Client::new();
    let requests: Vec<_> = (0..10)
        .map(|_| {
            let request = client
                .post(format!("{}/invocations", server.base))
                .json(&texts(1024));
            tokio::spawn(async move { request.send().await.unwrap() })
        })
        .collect();
    let mut refused = 0;
    for request in requests {
        let response = request.await.unwrap();
        match response.status().as_u16() {
            200 => {}
            503 => {
                assert_eq!(response.headers()["retry-after"], "1");
                let body: Value = response.json().await.unwrap();
                let error = body["error"].as_str().unwrap();
                assert!(error.starts_with("the server is busy"), "{error}");
                refused += 1;
            }
            other => panic!("{other}: {}", response.text().await.unwrap()),
        }
    }
    // 4096 inputs queue (--max-queued-inputs) behind the 1024 being computed.
    assert!(refused >= 5, "{refused} of 10 requests refused");
}

#[tokio::test]
async fn too_many_instances_are_refused_before_the_body_is_all_read() {
    let dir = tempfile::tempdir().unwrap();
    let model = fine_tuned(dir.path());
    let server = start(&model, &[]).await;
    let peak = || {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", server.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
        line.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    let before = peak();
    // 2.5 million rows in 5 MB.
    let response = reqwest::Client::new()
        .post(format!("{}/invocations", server.base))
        .header("content-type", "text/csv")
        .body("a\n".repeat(2_500_000))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    let error = body["error"].as_str().unwrap();
    assert!(
        error.starts_with("more than 1024 inputs in one request"),
        "{error}"
    );
    let grown_mb = (peak() - before) / 1024;
    assert!(
        grown_mb < 64,
        "the server's peak memory grew by {grown_mb} MB for a 5 MB body"
    );
}
