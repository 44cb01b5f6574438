//! The dashboard over plain HTTP: who may look (the token, the names it answers to), and the
//! states it must show rather than crash or hang on: an unknown study, a study with only
//! failed trials, a database that is missing, locked, replaced or from an older schema, a log
//! that is not a file, and requests that make no sense.

use crate::common;

use common::dashboard::{Dashboard, wait_until};
use common::{Scratch, assert_exit_says, assert_success};

const STUDY: &str = "name: q
objective: {metric: loss, goal: minimize}
parameters:
  - {id: x, type: double, min: -1, max: 1}
algorithm: random
max_trial_count: 4
parallel_trial_count: 2
trial:
  command: [{worker}]
";

fn run_study(scratch: &Scratch, text: &str) {
    let study = scratch.study("q.yaml", text);
    assert_success(&scratch.hptune(&["run", study.to_str().unwrap()]));
}

#[test]
fn a_wrong_or_missing_token_is_refused() {
    let scratch = Scratch::new();
    run_study(&scratch, STUDY);
    let dashboard = Dashboard::start(&scratch, &["--token", "s3cret"]);
    for path in [
        "/",
        "/studies/q",
        "/api/studies",
        "/studies/q/figures/history",
    ] {
        assert_eq!(
            dashboard.get(path, &[]).status,
            401,
            "{path} without a token"
        );
        let wrong = dashboard.get(path, &[("Authorization", "Bearer s3cre")]);
        assert_eq!(wrong.status, 401, "{path} with a wrong token");
        assert_eq!(
            dashboard.get(&format!("{path}?token=nope"), &[]).status,
            401
        );
        let right = dashboard.get(path, &[("Authorization", "Bearer s3cret")]);
        assert_eq!(right.status, 200, "{path}: {}", right.body);
    }
    // A browser gives the token once in the URL and keeps it as a cookie of this port.
    let first = dashboard.get("/?token=s3cret", &[]);
    assert_eq!(first.status, 200);
    let cookie = format!("hptune_token_{}", port(&dashboard));
    assert!(
        first.headers.contains(&format!("{cookie}=s3cret")),
        "{}",
        first.headers
    );
    let with_cookie = |value: &str| dashboard.get("/studies/q", &[("Cookie", value)]).status;
    assert_eq!(with_cookie(&format!("{cookie}=s3cret")), 200);
    assert_eq!(with_cookie(&format!("{cookie}=other")), 401);
}

#[test]
fn listening_beyond_this_machine_needs_a_token() {
    let scratch = Scratch::new();
    let out = scratch.hptune(&["dashboard", "--host", "0.0.0.0", "--port", "0"]);
    assert_exit_says(&out, 2, "--token");
}

#[test]
fn an_unknown_study_or_trial_is_a_404_page_and_the_server_stays_up() {
    let scratch = Scratch::new();
    run_study(&scratch, STUDY);
    let dashboard = Dashboard::start(&scratch, &[]);
    let unknown = dashboard.get("/studies/nope", &[]);
    assert_eq!(unknown.status, 404);
    assert!(
        unknown.body.contains("No study named “nope”") && unknown.body.contains("/studies/q"),
        "{}",
        unknown.body
    );
    for path in [
        "/studies/q/trials/99",
        "/studies/q/trials/x",
        "/studies/q/figures/pie",
        "/nothing",
        "/api/studies/nope/changes?since=1",
    ] {
        assert_eq!(dashboard.get(path, &[]).status, 404, "{path}");
    }
    assert_eq!(dashboard.get("/studies/q/trials/1", &[]).status, 200);
    assert_eq!(
        dashboard
            .get("/api/studies/q/changes?since=abc", &[])
            .status,
        400
    );
    assert_eq!(dashboard.get("/studies/q", &[]).status, 200);
}

#[test]
fn a_study_whose_trials_all_failed_is_shown_with_the_reason_and_no_nan() {
    let scratch = Scratch::new();
    run_study(
        &scratch,
        &STUDY
            .replace(
                "command: [{worker}]",
                "command: [{worker}]\n  env: {MODE: fail}",
            )
            .replace(
                "algorithm: random",
                "algorithm: random\nmax_failed_trial_count: 10",
            ),
    );
    let dashboard = Dashboard::start(&scratch, &[]);
    let page = dashboard.get("/studies/q", &[]);
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("No trial has succeeded yet (4 failed"),
        "{}",
        page.body
    );
    let html = page.body.split("<script>").next().unwrap();
    assert!(!html.contains("NaN"), "{html}");
    let trial = dashboard.get("/studies/q/trials/0?fragment=1", &[]);
    assert!(
        trial.body.contains("ValueError: bad things happened"),
        "{}",
        trial.body
    );
}

#[test]
fn a_missing_database_is_said_until_a_study_creates_it() {
    let scratch = Scratch::new();
    let dashboard = Dashboard::start(&scratch, &[]);
    let page = dashboard.get("/", &[]);
    assert_eq!(page.status, 503);
    assert!(page.body.contains("no database at"), "{}", page.body);
    assert!(
        !scratch.path("hptune.db").exists(),
        "the dashboard created the database"
    );
    run_study(&scratch, STUDY);
    let page = dashboard.get("/", &[]);
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("/studies/q"));
}

#[test]
fn a_database_from_an_older_schema_is_said_not_migrated() {
    let scratch = Scratch::new();
    run_study(&scratch, STUDY);
    let count = "SELECT COUNT(*) FROM _sqlx_migrations";
    let all = scratch.query(count)[0][0].as_i64().unwrap();
    scratch.execute(
        "DELETE FROM _sqlx_migrations WHERE version = (SELECT MAX(version) FROM _sqlx_migrations)",
    );
    let dashboard = Dashboard::start(&scratch, &[]);
    let page = dashboard.get("/studies/q", &[]);
    assert_eq!(page.status, 503);
    assert!(page.body.contains("has an older schema"), "{}", page.body);
    assert_eq!(
        scratch.query(count)[0][0],
        serde_json::json!(all - 1),
        "the dashboard migrated the database"
    );
}

#[test]
fn a_locked_database_is_said_and_read_again_once_free() {
    let scratch = Scratch::new();
    run_study(&scratch, STUDY);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let url = format!("sqlite://{}", scratch.path("hptune.db").display());
    // Another program takes the database for itself: an exclusive lock, held.
    let mut holder = runtime.block_on(async {
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::query("PRAGMA locking_mode = EXCLUSIVE")
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query("BEGIN EXCLUSIVE")
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query("UPDATE studies SET spec = spec")
            .execute(&mut conn)
            .await
            .unwrap();
        conn
    });
    let dashboard = Dashboard::start(&scratch, &[]);
    let page = dashboard.get("/studies/q", &[]);
    assert_eq!(page.status, 503);
    assert!(page.body.contains("locked"), "{}", page.body);
    runtime.block_on(async {
        use sqlx::Connection;
        sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
        holder.close().await.unwrap();
    });
    let page = dashboard.get("/studies/q", &[]);
    assert_eq!(page.status, 200, "{}", page.body);
}

#[test]
fn a_study_with_no_trials_says_so_in_each_figure() {
    let scratch = Scratch::new();
    run_study(&scratch, STUDY);
    // The study as a controller that has just created it leaves it: no trial yet.
    for table in ["measurements", "attempts", "trials"] {
        scratch.execute(&format!("DELETE FROM {table}"));
    }
    let dashboard = Dashboard::start(&scratch, &[]);
    let page = dashboard.get("/studies/q", &[]);
    assert_eq!(page.status, 200, "{}", page.body);
    let html = page.body.split("<script>").next().unwrap();
    assert!(!html.contains("NaN"), "{html}");
    for kind in ["history", "intermediate", "importance", "edf", "timeline"] {
        let figure = dashboard.get(&format!("/studies/q/figures/{kind}"), &[]);
        assert_eq!(figure.status, 200, "{kind}");
        assert!(
            figure.body.contains("class=\"empty\"") && !figure.body.contains("data-trial"),
            "{kind}: {}",
            figure.body
        );
    }
    let history = dashboard.get("/studies/q/figures/history", &[]);
    assert!(history.body.contains("No trials yet"), "{}", history.body);
}

#[test]
fn a_postgresql_study_is_shown_and_followed_while_it_runs() {
    let Some(url) = common::test_postgres() else {
        return;
    };
    let scratch = Scratch::on_postgres(&url);
    let name = common::unique_name("dashboard");
    let text = STUDY.replace("name: q", &format!("name: {name}"));
    run_study(&scratch, &text);
    let dashboard = Dashboard::start(&scratch, &[]);
    let page = dashboard.get(&format!("/studies/{name}"), &[]);
    assert_eq!(page.status, 200, "{}", page.body);
    let points = |dashboard: &Dashboard| {
        let history = dashboard.get(&format!("/studies/{name}/figures/history"), &[]);
        assert_eq!(history.status, 200, "{}", history.body);
        history
            .body
            .matches("<circle class=\"pt ok\" data-trial=")
            .count()
    };
    assert_eq!(points(&dashboard), 4);
    let list = dashboard.get("/api/studies", &[]);
    assert!(
        list.body.contains(&format!("\"name\":\"{name}\"")),
        "{}",
        list.body
    );
    let trial = dashboard.get(&format!("/studies/{name}/trials/2?fragment=1"), &[]);
    assert_eq!(trial.status, 200, "{}", trial.body);
    assert!(trial.body.contains("starting trial 2 of"), "{}", trial.body);
    // A controller runs more trials of the study while the dashboard follows it: it is not
    // held up by the dashboard's connections, and the new trials are seen without a restart.
    let changes = |since: u64| {
        let reply = dashboard.get(&format!("/api/studies/{name}/changes?since={since}"), &[]);
        assert_eq!(reply.status, 200, "{}", reply.body);
        serde_json::from_str::<serde_json::Value>(&reply.body).unwrap()
    };
    let revision = changes(0)["revision"].as_u64().unwrap();
    run_study(
        &scratch,
        &text.replace("max_trial_count: 4", "max_trial_count: 7"),
    );
    // Reads are fresh for half a second: the new trials appear at the latest then.
    wait_until("the three new trials in the changes", || {
        let numbers: Vec<u64> = changes(revision)["trials"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["number"].as_u64().unwrap())
            .collect();
        numbers == [4, 5, 6]
    });
    assert_eq!(points(&dashboard), 7);
}

/// The port of a dashboard's address.
fn port(dashboard: &Dashboard) -> &str {
    dashboard.base.rsplit(':').next().unwrap()
}

#[test]
fn a_named_pipe_in_place_of_a_log_is_said_and_the_dashboard_stays_up() {
    let scratch = Scratch::new();
    run_study(&scratch, STUDY);
    // The worker of trial 1 left a named pipe where its stderr log was: opening it to read
    // waits for a writer that never comes.
    let log = scratch.query("SELECT log_path FROM trials WHERE number = 1")[0][0]
        .as_str()
        .unwrap()
        .to_string();
    let stderr = scratch.dir.path().join(log).with_extension("err");
    std::fs::remove_file(&stderr).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&stderr)
        .status()
        .unwrap();
    assert!(made.success());
    let dashboard = Dashboard::start(&scratch, &[]);
    let trial = dashboard.get("/studies/q/trials/1?fragment=1", &[]);
    assert_eq!(trial.status, 200, "{}", trial.body);
    assert!(
        trial
            .body
            .contains("it is a named pipe, not a regular file")
            && trial.body.contains("starting trial 1 of"),
        "{}",
        trial.body
    );
    assert_eq!(dashboard.get("/studies/q", &[]).status, 200);
}

#[test]
fn a_site_that_points_its_name_at_the_dashboard_is_refused() {
    let scratch = Scratch::new();
    run_study(&scratch, STUDY);
    let dashboard = Dashboard::start(&scratch, &[]);
    let port = port(&dashboard);
    // DNS rebinding: the browser reaches 127.0.0.1 under the other site's name.
    for path in ["/", "/studies/q", "/api/studies", "/studies/q/trials/0"] {
        let page = dashboard.get(path, &[("Host", &format!("attacker.example:{port}"))]);
        assert_eq!(page.status, 403, "{path}: {}", page.body);
        assert!(!page.body.contains("/studies/q\""), "{}", page.body);
    }
    let page = dashboard.get("/", &[("Host", "attacker.example")]);
    assert!(
        page.body.contains("--allow-host attacker.example"),
        "{}",
        page.body
    );
    // Its own addresses and localhost, on any port (an SSH tunnel changes it).
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        "[::1]:9000".to_string(),
        "LocalHost:9000".to_string(),
    ] {
        let page = dashboard.get("/studies/q", &[("Host", &host)]);
        assert_eq!(page.status, 200, "{host}: {}", page.body);
    }
    // A name its user gives.
    let named = Dashboard::start(&scratch, &["--allow-host", "tune.example.org"]);
    let host = format!("tune.example.org:{}", self::port(&named));
    assert_eq!(named.get("/studies/q", &[("Host", &host)]).status, 200);
    assert_eq!(
        named
            .get("/studies/q", &[("Host", "attacker.example")])
            .status,
        403
    );
    let out = scratch.hptune(&["dashboard", "--port", "0", "--allow-host", "http://x:80"]);
    assert_exit_says(&out, 2, "not a host name");
}

#[test]
fn a_token_in_the_url_wins_over_a_stale_cookie_and_each_port_keeps_its_own() {
    let scratch = Scratch::new();
    run_study(&scratch, STUDY);
    let dashboard = Dashboard::start(&scratch, &["--token", "s3cret"]);
    let cookie = format!("hptune_token_{}", port(&dashboard));
    // The cookie of another dashboard of this machine (browsers send a host's cookies to
    // all its ports), and this one's own from an earlier token.
    for stale in [
        "hptune_token=other".to_string(),
        format!("{cookie}=earlier"),
    ] {
        let page = dashboard.get("/?token=s3cret", &[("Cookie", &stale)]);
        assert_eq!(page.status, 200, "with {stale}: {}", page.body);
        assert!(
            page.headers.contains(&format!("{cookie}=s3cret;")),
            "{}",
            page.headers
        );
    }
    let with_cookie = |value: &str| dashboard.get("/studies/q", &[("Cookie", value)]).status;
    assert_eq!(
        with_cookie(&format!("hptune_token_1=other; {cookie}=s3cret")),
        200
    );
    assert_eq!(with_cookie("hptune_token=s3cret"), 401);
}

#[test]
fn the_bearer_scheme_is_read_in_any_case() {
    let scratch = Scratch::new();
    run_study(&scratch, STUDY);
    let dashboard = Dashboard::start(&scratch, &["--token", "s3cret"]);
    for header in ["bearer s3cret", "BEARER s3cret", "Bearer  s3cret"] {
        let page = dashboard.get("/api/studies", &[("Authorization", header)]);
        assert_eq!(page.status, 200, "{header}: {}", page.body);
    }
    for header in ["Basic s3cret", "Bearers3cret", "bearer s3cre"] {
        let page = dashboard.get("/api/studies", &[("Authorization", header)]);
        assert_eq!(page.status, 401, "{header}");
    }
}

#[test]
fn a_token_with_a_plus_works_as_typed_in_the_url() {
    let scratch = Scratch::new();
    run_study(&scratch, STUDY);
    let dashboard = Dashboard::start(&scratch, &["--token", "a+b/c d"]);
    // As a user types or pastes it (a browser sends `+` as it is, a space as %20), and
    // fully percent-encoded.
    for url in ["/?token=a+b/c%20d", "/?token=a%2Bb%2Fc%20d"] {
        let page = dashboard.get(url, &[]);
        assert_eq!(page.status, 200, "{url}: {}", page.body);
    }
    assert_eq!(dashboard.get("/?token=a%20b/c%20d", &[]).status, 401);
    // The cookie it sets carries the token back.
    let page = dashboard.get("/?token=a+b/c%20d", &[]);
    let set = page
        .headers
        .lines()
        .filter_map(|line| line.split_once(": "))
        .find_map(|(name, value)| name.eq_ignore_ascii_case("set-cookie").then_some(value))
        .unwrap_or_else(|| panic!("no cookie set: {}", page.headers));
    let pair = set.split(';').next().unwrap();
    assert_eq!(
        dashboard.get("/studies/q", &[("Cookie", pair)]).status,
        200,
        "{pair}"
    );
}

#[test]
fn a_deleted_then_recreated_database_is_read_anew() {
    let scratch = Scratch::new();
    run_study(&scratch, STUDY);
    let dashboard = Dashboard::start(&scratch, &[]);
    assert_eq!(dashboard.get("/studies/q", &[]).status, 200);
    for file in ["hptune.db", "hptune.db-wal", "hptune.db-shm"] {
        let _ = std::fs::remove_file(scratch.path(file));
    }
    let page = dashboard.get("/", &[]);
    assert_eq!(page.status, 503, "{}", page.body);
    assert!(page.body.contains("no database at"), "{}", page.body);
    // A new study at the same path.
    run_study(&scratch, &STUDY.replace("name: q", "name: r"));
    let page = dashboard.get("/studies/r", &[]);
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(dashboard.get("/studies/q", &[]).status, 404);
    let list = dashboard.get("/api/studies", &[]);
    assert!(
        list.body.contains("\"name\":\"r\"") && !list.body.contains("\"name\":\"q\""),
        "{}",
        list.body
    );
}

#[test]
fn half_open_connections_are_closed_and_an_authorised_request_is_answered() {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Duration;

    let scratch = Scratch::new();
    run_study(&scratch, STUDY);
    let dashboard = Dashboard::start(&scratch, &["--token", "s3cret"]);
    let address = dashboard.base.trim_start_matches("http://").to_string();
    // More than the connection cap (256), each stopping in the middle of its headers: those
    // beyond the cap wait to be accepted until the read timeout (10 s) closes the first.
    let stalled: Vec<TcpStream> = (0..300)
        .map(|_| {
            let mut stream = TcpStream::connect(&address).unwrap();
            stream
                .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nAuthor")
                .unwrap();
            stream
        })
        .collect();
    let answered = dashboard.get("/api/studies", &[("Authorization", "Bearer s3cret")]);
    assert_eq!(answered.status, 200, "{}", answered.body);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let still_open = stalled
        .iter()
        .filter(|stream| {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .unwrap();
            let mut rest = Vec::new();
            // Closed by the server: the end of the stream, or a reset.
            let mut reader: &TcpStream = stream;
            match reader.read_to_end(&mut rest) {
                Ok(_) => false,
                Err(e) => e.kind() != std::io::ErrorKind::ConnectionReset,
            }
        })
        .count();
    assert_eq!(
        still_open, 0,
        "connections still open a minute after they stopped sending"
    );
}
