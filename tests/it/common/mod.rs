//! Helpers of the end-to-end tests: a scratch directory with a database, study files written
//! into it, and the real `hptune` binary run on them.

pub mod browser;
pub mod dashboard;
pub mod fake_capacity;
pub mod fake_cloud;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{OnceLock, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use serde_json::Value;

/// The test worker script.
pub fn worker() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/workers/quadratic.sh")
        .display()
        .to_string()
}

/// `hptune-trainer`, built beside `hptune` (by cargo when this package's tests run alone).
pub fn trainer() -> PathBuf {
    cargo_build(
        &["-p", "hptune-trainer", "--bin", "hptune-trainer"],
        Path::new(env!("CARGO_BIN_EXE_hptune")).with_file_name("hptune-trainer"),
    )
}

/// The example worker `examples/objective.rs` (`target/<profile>/examples/objective`), built
/// once per run of the tests, if missing or stale, so that a test filter that leaves out the
/// examples (`cargo test --test it bayes_study::`) still finds it up to date.
pub fn objective_example() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            cargo_build(
                &["-p", "hptune", "--example", "objective"],
                Path::new(env!("CARGO_BIN_EXE_hptune")).with_file_name("examples/objective"),
            )
        })
        .clone()
}

/// Runs `cargo build ARGS` in this workspace with the cargo that runs the tests, into the same
/// target folder: cargo builds what is missing or stale (nothing, when `cargo test` built it
/// already), and its lock on the build folder makes concurrent builds wait for each other.
/// Returns `built`, the file the build makes; panics with cargo's messages when the build
/// fails or leaves no file there.
///
/// The variables cargo sets for the test (`CARGO_PKG_NAME`, `CARGO_MANIFEST_DIR`, ...) are not
/// passed on: build scripts that watch them (ring's) would run again, and every dependant
/// would be built again here and once more by the next `cargo` command.
fn cargo_build(args: &[&str], built: PathBuf) -> PathBuf {
    let mut cargo = Command::new(env!("CARGO"));
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_MANIFEST_")
            || [
                "CARGO_CRATE_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "OUT_DIR",
            ]
            .contains(&name.as_ref())
        {
            cargo.env_remove(name.as_ref());
        }
    }
    let out = cargo
        .arg("build")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success() && built.is_file(),
        "cargo build {} did not build {}:\n{}",
        args.join(" "),
        built.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    built
}

/// A fixture of the trainer's tests (the tiny BERT, its data).
pub fn tiny(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("trainer/tests/fixtures")
        .join(name)
}

/// A port of 127.0.0.1 free now, for a server a test starts.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An `hptune-trainer serve` a test started, on a port of 127.0.0.1; killed when dropped.
pub struct Serving {
    /// Its base URL.
    pub base: String,
    child: std::process::Child,
    client: reqwest::Client,
}

impl Serving {
    /// Starts `command` (`... serve --model-dir DIR`) on 127.0.0.1 at SageMaker's port
    /// variable, and waits, at most a minute, until its `/ping` answers 200 (the model loaded).
    pub async fn start(mut command: Command) -> Self {
        let port = free_port();
        let child = command
            .args(["--host", "127.0.0.1"])
            .env("SAGEMAKER_BIND_TO_PORT", port.to_string())
            .env_remove("AIP_HTTP_PORT")
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("serve starts");
        let serving = Self {
            base: format!("http://127.0.0.1:{port}"),
            child,
            client: reqwest::Client::new(),
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !serving
            .client
            .get(format!("{}/ping", serving.base))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "serve never became healthy"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        serving
    }

    /// The predictions `route` answers for `instances` (texts), as JSON.
    pub async fn predictions(&self, route: &str, instances: &[&str]) -> Vec<Value> {
        let answer: Value = self
            .client
            .post(format!("{}{route}", self.base))
            .json(&serde_json::json!({"instances": instances}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        match &answer["predictions"] {
            Value::Array(predictions) => predictions.clone(),
            _ => panic!("{route}: no predictions in {answer}"),
        }
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A scratch directory holding a database, logs and study files.
pub struct Scratch {
    pub dir: tempfile::TempDir,
    postgres: Option<String>,
}

/// The PostgreSQL database of the tests (`scripts/start-postgres.sh` starts one and prints
/// its URL), if `HPTUNE_TEST_POSTGRES` names it.
pub fn test_postgres() -> Option<String> {
    let url = std::env::var("HPTUNE_TEST_POSTGRES")
        .ok()
        .filter(|u| !u.is_empty());
    if url.is_none() {
        eprintln!(
            "skipped: HPTUNE_TEST_POSTGRES is not set (scripts/start-postgres.sh prints a URL for it)"
        );
    }
    url
}

/// The default partition of the Slurm cluster of the tests (`scripts/start-slurm.sh`
/// starts one), if its commands answer. Without one the test is skipped, unless
/// `HPTUNE_TEST_SLURM=required` (CI) makes that a failure.
pub fn test_slurm() -> Option<String> {
    let partitions = Command::new("sinfo")
        .args(["--noheader", "--format=%P"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned());
    // The default partition is the one sinfo marks with `*`.
    let default = partitions.as_deref().and_then(|text| {
        text.split_whitespace()
            .find_map(|p| p.strip_suffix('*'))
            .map(str::to_string)
    });
    if default.is_none() {
        let why = "no Slurm cluster answers (scripts/start-slurm.sh starts one)";
        if std::env::var("HPTUNE_TEST_SLURM").as_deref() == Ok("required") {
            panic!("HPTUNE_TEST_SLURM=required, but {why}");
        }
        eprintln!("skipped: {why}");
    }
    default
}

/// The Slurm cluster of the tests, taken in turns: the tests that run jobs on it hold it
/// shared, the tests that stop its controller or drain its node hold it alone. All run in
/// one process (this test binary), in parallel threads.
static SLURM: RwLock<()> = RwLock::new(());

/// Holds the Slurm cluster beside the other tests that run jobs on it, until dropped: no
/// test takes the cluster down meanwhile. Taken once per test, first, before
/// [`test_slurm`] asks the cluster anything.
pub fn slurm_shared() -> RwLockReadGuard<'static, ()> {
    SLURM.read().unwrap_or_else(PoisonError::into_inner)
}

/// Holds the Slurm cluster alone until dropped, for a test that takes it away from every
/// other job (stops its controller, drains its node).
pub fn slurm_alone() -> RwLockWriteGuard<'static, ()> {
    SLURM.write().unwrap_or_else(PoisonError::into_inner)
}

/// A study name no earlier run used: a PostgreSQL database outlives the tests.
pub fn unique_name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

impl Scratch {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("a temporary directory"),
            postgres: None,
        }
    }

    /// A scratch directory whose name begins with `prefix` (spaces, `%`, `=` and all).
    pub fn named(prefix: &str) -> Self {
        Self {
            dir: tempfile::Builder::new()
                .prefix(prefix)
                .tempdir()
                .expect("a temporary directory"),
            postgres: None,
        }
    }

    /// A scratch directory whose commands use this PostgreSQL database.
    pub fn on_postgres(url: &str) -> Self {
        Self {
            postgres: Some(url.to_string()),
            ..Self::new()
        }
    }

    /// A scratch on the tests' PostgreSQL database (`None`, said skipped, without one), the
    /// database migrated by a first command and cleared of an earlier run's study `name`
    /// (a PostgreSQL database outlives the tests).
    pub fn on_postgres_without(name: &str) -> Option<Self> {
        let scratch = Self::on_postgres(&test_postgres()?);
        assert_success(&scratch.hptune(&["studies"]));
        scratch.execute(&format!("DELETE FROM studies WHERE name = '{name}'"));
        Some(scratch)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn storage(&self) -> String {
        match &self.postgres {
            Some(url) => url.clone(),
            None => format!("sqlite://{}", self.path("hptune.db").display()),
        }
    }

    /// Writes a study file; `{worker}` in the text becomes the test worker's path.
    pub fn study(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, text.replace("{worker}", &worker())).expect("write the study");
        path
    }

    /// A command running `hptune ARGS` in the scratch directory on its database.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_hptune"));
        command
            .args(args)
            .current_dir(self.dir.path())
            .env("HPTUNE_STORAGE", self.storage())
            .env_remove("RUST_LOG");
        command
    }

    pub fn hptune(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("hptune runs")
    }

    /// `hptune trials STUDY --format json`, parsed.
    pub fn trials(&self, study: &str) -> Vec<Value> {
        let out = self.hptune(&["trials", study, "--format", "json"]);
        assert_success(&out);
        match serde_json::from_slice(&out.stdout).expect("trials --format json is JSON") {
            Value::Array(trials) => trials,
            other => panic!("not an array: {other}"),
        }
    }

    /// Runs SQL on the database (read-only checks of what was stored).
    pub fn query(&self, sql: &str) -> Vec<Vec<Value>> {
        self.try_query(sql).unwrap()
    }

    /// Changes the database as another controller would (the tests that stage what a
    /// controller on another machine does).
    pub fn execute(&self, sql: &str) {
        self.on_database(
            "",
            |pool| async move { sqlx::query(sql).execute(&pool).await },
        )
        .unwrap();
    }

    /// Whether a write to the study `name` (its row and its trials') could start now, or
    /// another connection holds them locked (waiting at most half a second to know).
    pub fn study_is_unlocked(&self, name: &str) -> bool {
        let postgres = self.postgres.is_some();
        let attempt = self.on_database("", |pool| async move {
            let mut conn = pool.acquire().await?;
            let statements: &[&str] = if postgres {
                &[
                    "BEGIN",
                    "SET LOCAL lock_timeout = '500ms'",
                    "UPDATE studies SET id = id WHERE name = $1",
                    "UPDATE trials SET id = id WHERE study_id = (SELECT id FROM studies WHERE name = $1)",
                ]
            } else {
                &["PRAGMA busy_timeout = 500", "BEGIN IMMEDIATE"]
            };
            let mut result = Ok(());
            for sql in statements {
                let query = sqlx::query(sql);
                let query = if sql.contains("$1") { query.bind(name) } else { query };
                if let Err(e) = query.execute(&mut *conn).await {
                    result = Err(e);
                    break;
                }
            }
            sqlx::query("ROLLBACK").execute(&mut *conn).await.ok();
            result
        });
        attempt.is_ok()
    }

    /// Runs `work` on a pool of the database (SQLite opened with `sqlite_query`).
    fn on_database<T, F>(
        &self,
        sqlite_query: &str,
        work: impl FnOnce(sqlx::AnyPool) -> F,
    ) -> Result<T, sqlx::Error>
    where
        F: std::future::Future<Output = Result<T, sqlx::Error>>,
    {
        let url = match &self.postgres {
            Some(url) => url.clone(),
            None => format!(
                "sqlite://{}{sqlite_query}",
                self.path("hptune.db").display()
            ),
        };
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            sqlx::any::install_default_drivers();
            work(sqlx::AnyPool::connect(&url).await?).await
        })
    }

    /// Runs SQL on the database, or says why it cannot (e.g. a database still being created).
    pub fn try_query(&self, sql: &str) -> Result<Vec<Vec<Value>>, sqlx::Error> {
        self.on_database("?mode=ro", |pool| async move {
            use sqlx::Row;
            let rows = sqlx::query(sql).fetch_all(&pool).await?;
            Ok(rows
                .iter()
                .map(|row| {
                    (0..row.columns().len())
                        .map(|i| {
                            if let Ok(v) = row.try_get::<Option<i64>, _>(i) {
                                return v.map_or(Value::Null, Value::from);
                            }
                            if let Ok(v) = row.try_get::<Option<f64>, _>(i) {
                                return v.map_or(Value::Null, Value::from);
                            }
                            row.try_get::<Option<String>, _>(i)
                                .unwrap()
                                .map_or(Value::Null, Value::from)
                        })
                        .collect()
                })
                .collect())
        })
    }
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Checks that the command exited with `code` and said `expected` on stderr; returns stderr.
pub fn assert_exit_says(out: &Output, code: i32, expected: &str) -> String {
    let message = stderr(out);
    assert_eq!(out.status.code(), Some(code), "{message}");
    assert!(
        message.contains(expected),
        "expected '{expected}' in:\n{message}"
    );
    message
}

pub fn assert_success(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        stdout(out),
        stderr(out)
    );
}

/// The sum of squares of a trial's numeric parameters: what the test worker reports.
pub fn expected_loss(trial: &Value) -> f64 {
    trial["params"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(Value::as_f64)
        .map(|v| v * v)
        .sum()
}

pub fn states(trials: &[Value]) -> Vec<&str> {
    trials
        .iter()
        .map(|t| t["state"].as_str().unwrap())
        .collect()
}
