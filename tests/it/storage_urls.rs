//! The storage URL as a user gives it: its password never shows (in `--help`, in the errors
//! of `run`, `studies` and `relay`), a database that cannot be opened says why at once, and
//! SQLite's query parameters (`mode=ro`) are honoured.

use crate::common;

use common::{Scratch, assert_exit_says, assert_success, stderr, stdout};

const STUDY: &str = r#"
name: quad
objective: {metric: loss, goal: minimize}
parameters:
  - {id: x, type: double, min: -2.0, max: 2.0}
max_trial_count: 2
seed: 3
trial:
  command: [{worker}]
"#;

/// `hptune ARGS` with `--storage URL`, in a scratch directory holding the study file.
fn hptune_on(scratch: &Scratch, url: &str, args: &[&str]) -> std::process::Output {
    let mut command = scratch.command(args);
    command.env("HPTUNE_STORAGE", url);
    command.output().unwrap()
}

/// The relay of a trial job, as its container starts it.
const RELAY: [&str; 11] = [
    "relay",
    "--study",
    "quad",
    "--trial",
    "0",
    "--attempt",
    "1",
    "--metric",
    "loss",
    "--",
    "true",
];

/// sqlx's own log lines (`ERROR sqlx...`, `WARN ...`): a user should see one message.
fn assert_no_log_lines(text: &str) {
    assert!(
        !text
            .lines()
            .any(|l| l.contains(" ERROR ") || l.contains(" WARN ")),
        "raw log lines:\n{text}"
    );
}

#[test]
fn help_does_not_show_the_password_of_hptune_storage() {
    let scratch = Scratch::new();
    for args in [&["run", "--help"][..], &["--help"]] {
        let out = hptune_on(
            &scratch,
            "postgres://tuner:hunter2pw@db.example/studies",
            args,
        );
        assert_success(&out);
        let text = stdout(&out);
        assert!(text.contains("HPTUNE_STORAGE"), "{text}");
        assert!(!text.contains("hunter2pw"), "{text}");
    }
}

/// A password percent-encoded, given as `?password=`, or holding a raw `/` (which makes the
/// URL ambiguous: refused as bad input) is never shown by `run`, `studies` or `relay`.
#[test]
fn storage_errors_never_show_the_password() {
    let scratch = Scratch::new();
    let study = scratch.study("study.yaml", STUDY);
    let study = study.to_str().unwrap();
    for (url, passwords, code, says) in [
        (
            "postgres://tuner@127.0.0.1:1/studies?password=qsecret9",
            &["qsecret9"][..],
            1,
            "cannot open the database postgres://tuner@127.0.0.1:1/studies?password=***: connection refused",
        ),
        (
            "postgres://tuner:pw/x9@127.0.0.1:1/studies",
            &["pw/x9", "x9@"],
            2,
            "percent-encoded (%2F",
        ),
        (
            "postgres://tuner:pw%2Fx9@127.0.0.1:1/studies",
            &["pw%2Fx9", "pw/x9"],
            1,
            "cannot open the database postgres://tuner:***@127.0.0.1:1/studies: connection refused",
        ),
    ] {
        for args in [&["run", study][..], &["studies"], &RELAY] {
            let out = hptune_on(&scratch, url, args);
            let all = format!("{}{}", stdout(&out), stderr(&out));
            for password in passwords {
                assert!(!all.contains(password), "{args:?} on {url}:\n{all}");
            }
            assert_eq!(out.status.code(), Some(code), "{args:?} on {url}:\n{all}");
            assert!(stderr(&out).contains(says), "{args:?} on {url}:\n{all}");
            assert_no_log_lines(&all);
        }
    }
}

#[test]
fn a_file_that_is_not_a_database_is_reported_at_once_with_the_cause() {
    let scratch = Scratch::new();
    let path = scratch.path("garbage.db");
    std::fs::write(&path, "this is not a database, ".repeat(200)).unwrap();
    let url = format!("sqlite://{}", path.display());
    let out = hptune_on(&scratch, &url, &["studies"]);
    let message = assert_exit_says(
        &out,
        1,
        &format!("cannot open the database {url}: file is not a database"),
    );
    assert_no_log_lines(&message);
    assert_eq!(message.lines().count(), 1, "{message}");
}

#[test]
fn a_refused_postgres_connection_is_reported_at_once_with_the_cause() {
    let scratch = Scratch::new();
    let out = hptune_on(
        &scratch,
        "postgres://tuner:s3cret@127.0.0.1:1/studies",
        &["studies"],
    );
    let message = assert_exit_says(
        &out,
        1,
        "cannot open the database postgres://tuner:***@127.0.0.1:1/studies: connection refused",
    );
    assert!(!message.contains("s3cret"), "{message}");
    assert_no_log_lines(&message);
}

/// `?mode=ro` opens the file read-only: the listing commands read it, a study run on it
/// fails with SQLite's reason, and the file is not written.
#[test]
fn a_read_only_sqlite_url_is_never_written() {
    let scratch = Scratch::new();
    let study = scratch.study("study.yaml", STUDY);
    assert_success(&scratch.hptune(&["run", study.to_str().unwrap()]));
    let read_only = format!("{}?mode=ro", scratch.storage());
    let listed = hptune_on(&scratch, &read_only, &["studies"]);
    assert_success(&listed);
    assert!(stdout(&listed).contains("quad"), "{}", stdout(&listed));

    let other = scratch.study("other.yaml", &STUDY.replace("name: quad", "name: other"));
    let out = hptune_on(&scratch, &read_only, &["run", other.to_str().unwrap()]);
    assert_exit_says(&out, 1, "attempt to write a readonly database");
    let names = scratch.query("SELECT name FROM studies ORDER BY id");
    assert_eq!(names, [[serde_json::Value::from("quad")]]);

    let wrong = hptune_on(
        &scratch,
        &format!("{}?mode=readonly", scratch.storage()),
        &["studies"],
    );
    assert_exit_says(&wrong, 2, "unknown value \"readonly\" for `mode`");
}

/// A database whose schema a newer hptune brought further than this one knows is said to be
/// so at once (the migrator's refusal is not a race with another controller to wait out), and
/// nothing of it changes.
#[test]
fn a_database_of_a_newer_hptune_is_reported_at_once() {
    let scratch = Scratch::new();
    let study = scratch.study("study.yaml", STUDY);
    assert_success(&scratch.hptune(&["run", study.to_str().unwrap()]));
    scratch.execute(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (9999, 'from the future', TRUE, x'00', 0)",
    );
    let out = scratch.hptune(&["studies"]);
    let message = assert_exit_says(
        &out,
        1,
        "its schema is at version 9999, which this hptune does not know",
    );
    assert!(message.contains("written by a newer hptune"), "{message}");
    assert_eq!(message.lines().count(), 1, "{message}");
    assert_eq!(
        scratch.query("SELECT COUNT(*) FROM trials")[0][0],
        serde_json::Value::from(2)
    );
}
