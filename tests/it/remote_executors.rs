//! The Vertex AI, Kubernetes and SageMaker executors end to end: the real `hptune` binary
//! against a fake of each API on 127.0.0.1 (tests/common/fake_cloud.rs) that checks every
//! request and runs each job's container command here, so that `hptune relay` really writes
//! the measurements into PostgreSQL. Skipped without HPTUNE_TEST_POSTGRES.

use crate::common;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use common::fake_cloud::{Api, FakeCloud, Script, SeenModel, throwaway_rsa_key, write};
use common::{Scratch, assert_success, expected_loss, stderr, stdout};
use serde_json::Value;

const STUDY: &str = r#"
name: {name}
objective: {metric: loss, goal: minimize}
parameters:
  - {id: x, type: double, min: -2.0, max: 2.0}
  - {id: n, type: integer, min: 1, max: 5}
algorithm: random
max_trial_count: 6
parallel_trial_count: 2
max_failed_trial_count: 3
seed: 3
artifacts: {keep_best: 1}
trial:
  command: [{worker}]
  timeout: 5m
  executor:
{block}
"#;

/// A fake engine, the credentials that lead to it, and the secrets among them.
struct Cloud {
    scratch: Scratch,
    fake: FakeCloud,
    env: Vec<(String, String)>,
    block: String,
    secrets: Vec<String>,
}

/// Sets up the fake of `api` with `script`, credentials pointing at it, and the executor
/// block of a study file; `None` without PostgreSQL.
fn cloud(api: Api, mut script: Script) -> Option<Cloud> {
    let postgres = common::test_postgres()?;
    let scratch = Scratch::on_postgres(&postgres);
    let secret = format!("secret-{}", common::unique_name("credential"));
    let mut env = Vec::new();
    let mut secrets = vec![secret.clone()];
    // The database password must never show: the URL with it is a credential.
    if let Some((credentials, _)) = postgres.split_once('@')
        && credentials.matches(':').count() == 2
    {
        secrets.push(format!("{}@", &credentials["postgres://".len()..]));
    }
    let common_fields = "    poll_interval: 200ms\n    request_timeout: 2s\n";
    let (fake, block) = match api {
        Api::Vertex => {
            let (private, public) = throwaway_rsa_key(scratch.dir.path());
            script.credential = secret.clone();
            script.jwt_public_key = Some(public);
            let fake = FakeCloud::start(api, script, scratch.path("jobs"));
            let key = serde_json::json!({
                "type": "service_account",
                "project_id": "test-project",
                "private_key_id": "test-only",
                "private_key": private,
                "client_email": "tuner@test-project.iam.gserviceaccount.com",
                "token_uri": format!("{}/token", fake.url),
            });
            let path = write(scratch.path("service-account.json"), &key.to_string());
            env.push((
                "GOOGLE_APPLICATION_CREDENTIALS".into(),
                path.display().to_string(),
            ));
            secrets.push(private.lines().nth(5).unwrap().to_string());
            let block = format!(
                "    kind: vertex\n    project: test-project\n    region: europe-west4\n    image: europe-docker.pkg.dev/test-project/hptune/trainer:test\n    machine_type: n1-standard-4\n    accelerator: {{type: NVIDIA_TESLA_T4, count: 1}}\n    base_output_dir: gs://bucket/hptune/\n    endpoint: {}\n{common_fields}",
                fake.url
            );
            (fake, block)
        }
        Api::Kubernetes => {
            script.credential = secret.clone();
            let fake = FakeCloud::start(api, script, scratch.path("jobs"));
            let kubeconfig = format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: test\ncontexts:\n  - name: test\n    context: {{cluster: fake, user: tuner, namespace: tuning}}\nclusters:\n  - name: fake\n    cluster: {{server: '{}'}}\nusers:\n  - name: tuner\n    user: {{token: {secret}}}\n",
                fake.url
            );
            let path = write(scratch.path("kubeconfig"), &kubeconfig);
            env.push(("KUBECONFIG".into(), path.display().to_string()));
            let block = format!(
                "    kind: kubernetes\n    image: ghcr.io/example/hptune:test\n    resources: {{cpu: '2', memory: 4Gi, gpu: 1}}\n    node_selector: {{cloud.google.com/gke-accelerator: nvidia-tesla-t4}}\n    service_account: trainer\n    ttl: 10m\n    artifacts_volume: {{claim: models, mount_path: /models}}\n{common_fields}"
            );
            (fake, block)
        }
        Api::SageMaker => {
            let session = format!("session-{secret}");
            script.credential = "AKIDTESTONLY".into();
            script.aws_secret = Some((secret.clone(), session.clone()));
            let fake = FakeCloud::start(api, script, scratch.path("jobs"));
            // The shared credentials file, at a profile other than the first.
            let file = format!(
                "[default]\naws_access_key_id = AKIDWRONG\naws_secret_access_key = wrong\n\n[tuning]\naws_access_key_id = AKIDTESTONLY\naws_secret_access_key = {secret}\naws_session_token = {session}\n"
            );
            let path = write(scratch.path("aws-credentials"), &file);
            env.push((
                "AWS_SHARED_CREDENTIALS_FILE".into(),
                path.display().to_string(),
            ));
            env.push(("AWS_PROFILE".into(), "tuning".into()));
            secrets.push(session);
            let block = format!(
                "    kind: sagemaker\n    region: eu-west-1\n    image: 123456789012.dkr.ecr.eu-west-1.amazonaws.com/hptune:test\n    role_arn: arn:aws:iam::123456789012:role/SageMakerRole\n    instance_type: ml.g4dn.xlarge\n    output_path: s3://bucket/hptune\n    endpoint: {}\n{common_fields}",
                fake.url
            );
            (fake, block)
        }
    };
    Some(Cloud {
        scratch,
        fake,
        env,
        block,
        secrets,
    })
}

impl Cloud {
    /// `hptune ARGS` with the credentials of the fake, and none from the test's environment.
    fn hptune(&self, args: &[&str]) -> std::process::Output {
        let mut command = self.scratch.command(args);
        for name in [
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_PROFILE",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "GCE_METADATA_HOST",
            "KUBERNETES_SERVICE_HOST",
        ] {
            command.env_remove(name);
        }
        command.envs(self.env.iter().cloned()).output().unwrap()
    }

    /// A study of 6 trials on this cloud, its name starting with `prefix`.
    fn study(&self, prefix: &str) -> (String, std::path::PathBuf) {
        let name = common::unique_name(prefix);
        let text = STUDY
            .replace("{name}", &name)
            .replace("{block}", &self.block);
        let path = self.scratch.study("study.yaml", &text);
        (name, path)
    }

    /// `hptune -v run STUDY`.
    fn run(&self, study: &Path) -> std::process::Output {
        self.hptune(&["-v", "run", study.to_str().unwrap()])
    }

    /// Checks that every request the fake got was one its API documents.
    fn assert_requests_were_right(&self) {
        let problems = self.fake.seen(|s| s.problems.clone());
        assert!(problems.is_empty(), "requests off the API: {problems:#?}");
    }

    /// Every text the run left: its output, the files of the controller and the jobs, the
    /// study's rows.
    fn everything_written(&self, name: &str, out: &std::process::Output) -> String {
        let mut all = format!("{}\n{}\n", stdout(out), stderr(out));
        for dir in ["hptune-logs", "jobs"] {
            collect_files(&self.scratch.path(dir), &mut all);
        }
        let study = format!("(SELECT id FROM studies WHERE name = '{name}')");
        for sql in [
            format!("SELECT * FROM studies WHERE name = '{name}'"),
            format!("SELECT * FROM trials WHERE study_id = {study}"),
            format!(
                "SELECT a.* FROM attempts a JOIN trials t ON t.id = a.trial_id WHERE t.study_id = {study}"
            ),
            format!(
                "SELECT m.* FROM measurements m JOIN trials t ON t.id = m.trial_id WHERE t.study_id = {study}"
            ),
        ] {
            for row in self.scratch.query(&sql) {
                all.push_str(&format!("{row:?}\n"));
            }
        }
        all
    }
}

fn collect_files(dir: &Path, out: &mut String) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_files(&path, out);
        } else {
            out.push_str(&String::from_utf8_lossy(&std::fs::read(&path).unwrap()));
        }
    }
}

/// A full study of 6 trials, 2 at a time, through the fake of `api`, which throttles the
/// first submission, fails the first poll with a 500, answers one poll past the client's
/// timeout, preempts trial 1's first attempt, and runs trial 3's worker in its failing mode.
fn full_study_through(api: Api) {
    let script = Script {
        throttle_first_create: true,
        fail_first_poll: true,
        slow_poll: Some((6, Duration::from_secs(3))),
        preempt: vec![1],
        trial_env: HashMap::from([(3, vec![("MODE".to_string(), "fail".to_string())])]),
        ..Script::default()
    };
    let Some(cloud) = cloud(api, script) else {
        return;
    };
    let (name, study) = cloud.study("remote");
    let out = cloud.run(&study);
    assert_success(&out);

    cloud.assert_requests_were_right();
    let faults = cloud.fake.seen(|s| s.faults.clone());
    let throttled = if api == Api::SageMaker { 400 } else { 429 };
    for fault in [throttled, 500, 0] {
        assert!(
            faults.contains(&fault),
            "fault {fault} not played: {faults:?}"
        );
    }
    // Each fault was met by the client and tried again.
    let log = stderr(&out);
    for retried in [
        format!("HTTP {throttled}"),
        "HTTP 500".to_string(),
        "no answer within request_timeout".to_string(),
    ] {
        assert!(
            log.lines()
                .any(|l| l.contains(&retried) && l.contains("trying again")),
            "no retry after {retried}:\n{log}"
        );
    }
    let mut created = cloud.fake.seen(|s| s.created.clone());
    created.sort();
    assert_eq!(
        created,
        [(0, 1), (1, 1), (1, 2), (2, 1), (3, 1), (4, 1), (5, 1)],
        "one job per attempt"
    );

    let trials = cloud.scratch.trials(&name);
    assert_eq!(trials.len(), 6);
    for trial in &trials {
        let number = trial["number"].as_u64().unwrap();
        if number == 3 {
            assert_eq!(trial["state"], "failed", "{trial}");
            let error = trial["error"].as_str().unwrap();
            assert!(error.contains("the job failed"), "{error}");
            assert!(error.contains("exit"), "{error}");
            assert!(error.contains("ValueError: bad things happened"), "{error}");
        } else {
            assert_eq!(trial["state"], "succeeded", "{trial}");
            let value = trial["value"].as_f64().unwrap();
            assert!((value - expected_loss(trial)).abs() < 1e-9, "{trial}");
        }
    }
    let attempts = cloud.scratch.query(&format!(
        "SELECT a.attempt, a.outcome, a.error FROM attempts a JOIN trials t ON t.id = a.trial_id
         WHERE t.study_id = (SELECT id FROM studies WHERE name = '{name}') AND t.number = 1 ORDER BY a.attempt"
    ));
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0][1], "retried");
    assert!(
        attempts[0][2].as_str().unwrap().contains("preempted"),
        "{attempts:?}"
    );
    assert_eq!(attempts[1][1], "succeeded");
    // The intermediate report of each succeeded trial's last attempt came through the relay.
    let steps = cloud.scratch.query(&format!(
        "SELECT COUNT(*) FROM measurements m JOIN trials t ON t.id = m.trial_id AND m.attempt = t.attempt
         WHERE t.study_id = (SELECT id FROM studies WHERE name = '{name}') AND m.step = 1 AND m.metric = 'loss'"
    ));
    assert_eq!(
        steps[0][0],
        Value::from(5),
        "step 1 of trials 0, 1, 2, 4, 5"
    );
    models_are_recorded_and_kept(&cloud, api, &name);

    let written = cloud.everything_written(&name, &out);
    for secret in &cloud.secrets {
        assert!(
            !written.contains(secret.as_str()),
            "a credential leaked: {secret}"
        );
    }
}

/// Each attempt's job told its worker where to save the model, the engine's location of it
/// is recorded with the attempt as a local folder would be, and with `keep_best: 1` none of
/// them is deleted: hptune never deletes a remote model, and the rows say it is there.
fn models_are_recorded_and_kept(cloud: &Cloud, api: Api, name: &str) {
    let models = cloud.fake.seen(|s| s.models.clone());
    assert_eq!(models.len(), 7, "{models:#?}");
    for SeenModel {
        trial,
        attempt,
        location,
        worker_env,
    } in &models
    {
        let stem = match attempt {
            1 => format!("trial-{trial}"),
            k => format!("trial-{trial}-attempt-{k}"),
        };
        let location = location.as_deref().unwrap_or_default();
        let (expected, output, aip) = match api {
            Api::Vertex => {
                let base = format!("gs://bucket/hptune/{name}/{stem}");
                (
                    format!("{base}/model"),
                    format!("/gcs/bucket/hptune/{name}/{stem}/model"),
                    format!("{base}/model/"),
                )
            }
            Api::Kubernetes => {
                let folder = format!("/models/{name}/{stem}");
                (
                    format!("pvc://models/{name}/{stem}"),
                    folder.clone(),
                    folder,
                )
            }
            Api::SageMaker => {
                let job = location
                    .strip_prefix("s3://bucket/hptune/")
                    .and_then(|l| l.strip_suffix("/output/model.tar.gz"))
                    .unwrap_or_default();
                assert!(job.starts_with("hptune-"), "{location}");
                let dir = "/opt/ml/model".to_string();
                (location.to_string(), dir.clone(), dir)
            }
        };
        assert_eq!(location, expected, "trial {trial} attempt {attempt}");
        assert_eq!(
            worker_env,
            &(Some(output), Some(aip)),
            "trial {trial} attempt {attempt}"
        );
    }
    let recorded = cloud.scratch.query(&format!(
        "SELECT t.number, a.attempt, a.artifact_dir, a.artifact_removed_at, t.artifact_dir, t.artifact_removed_at
         FROM attempts a JOIN trials t ON t.id = a.trial_id
         WHERE t.study_id = (SELECT id FROM studies WHERE name = '{name}') ORDER BY t.number, a.attempt"
    ));
    assert_eq!(recorded.len(), 7, "{recorded:?}");
    for row in &recorded {
        let (trial, attempt) = (row[0].as_u64().unwrap(), row[1].as_u64().unwrap() as u32);
        let seen = models
            .iter()
            .find(|m| m.trial == trial && m.attempt == attempt)
            .and_then(|m| m.location.clone());
        assert_eq!(row[2].as_str(), seen.as_deref(), "{row:?}");
        assert_eq!(row[3], Value::Null, "never removed: {row:?}");
        assert_eq!(row[5], Value::Null, "never removed: {row:?}");
    }
    // The trial's row holds its last attempt's model.
    let last = |trial: u64| recorded.iter().rfind(|r| r[0] == trial).unwrap();
    for row in &recorded {
        assert_eq!(row[4], last(row[0].as_u64().unwrap())[2], "{row:?}");
    }
    let best = cloud.hptune(&["best", name, "--format", "json"]);
    assert_success(&best);
    let best: Value = serde_json::from_slice(&best.stdout).unwrap();
    let artifact = cloud.hptune(&["best", name, "--artifact"]);
    assert_success(&artifact);
    assert_eq!(
        stdout(&artifact).trim(),
        last(best["number"].as_u64().unwrap())[2].as_str().unwrap()
    );
}

#[test]
fn a_study_runs_as_vertex_ai_custom_jobs() {
    full_study_through(Api::Vertex);
}

#[test]
fn a_study_runs_as_kubernetes_jobs() {
    full_study_through(Api::Kubernetes);
}

#[test]
fn a_study_runs_as_sagemaker_training_jobs() {
    full_study_through(Api::SageMaker);
}

/// Early stopping cancels the job of an unpromising trial: ASHA with factor 2 keeps, at step
/// 1, only the better of trial 0 (1.0) and trial 1 (5.0), so trial 1 is stopped there and its
/// job cancelled; its relay stops the worker before its last steps.
fn early_stopping_cancels_the_job(api: Api) {
    let Some(cloud) = cloud(api, Script::default()) else {
        return;
    };
    let curves = cloud.scratch.path("curves");
    std::fs::create_dir(&curves).unwrap();
    std::fs::write(curves.join("curve-1.txt"), "1.0\n0.5\n0.2\n").unwrap();
    std::fs::write(curves.join("curve-2.txt"), "5.0\n4.0\n3.0\n2.5\n2.0\n").unwrap();
    let worker = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/workers/curve.sh");
    let name = common::unique_name("remote-stop");
    let text = format!(
        "name: {name}\nobjective: {{metric: loss, goal: minimize}}\nparameters:\n  - {{id: q, type: discrete, values: [1, 2]}}\nalgorithm: grid\nparallel_trial_count: 1\nearly_stopping: {{rule: asha, min_resource: 1, reduction_factor: 2}}\ntrial:\n  command: [{}]\n  env: {{CURVE_DIR: '{}', STEP_SLEEP: '0.5'}}\n  executor:\n{}",
        worker.display(),
        curves.display(),
        cloud.block
    );
    let study = cloud.scratch.study("study.yaml", &text);
    let out = cloud.run(&study);
    assert_success(&out);
    cloud.assert_requests_were_right();
    let trials = cloud.scratch.trials(&name);
    assert_eq!(common::states(&trials), ["succeeded", "stopped"]);
    assert_eq!(trials[0]["value"].as_f64(), Some(0.2));
    assert_eq!(cloud.fake.seen(|s| s.cancelled.clone()), [(1, 1)]);
    let steps = cloud.scratch.query(&format!(
        "SELECT MAX(m.step) FROM measurements m JOIN trials t ON t.id = m.trial_id
         WHERE t.study_id = (SELECT id FROM studies WHERE name = '{name}') AND t.number = 1"
    ));
    assert!(
        steps[0][0].as_i64().unwrap() < 5,
        "the stopped worker ran to its end: {steps:?}"
    );
}

/// One trial on Vertex AI whose engine answers `down_for_polls` state requests with a 503,
/// under the study's `outage_limit` (`None`: the default).
fn through_an_outage(down_for_polls: usize, outage_limit: Option<&str>) -> Option<(Cloud, String)> {
    let script = Script {
        down_for_polls,
        ..Script::default()
    };
    let cloud = cloud(Api::Vertex, script)?;
    let name = common::unique_name("remote-outage");
    let text = STUDY
        .replace("{name}", &name)
        .replace("max_trial_count: 6", "max_trial_count: 1")
        .replace(
            "{block}",
            &match outage_limit {
                Some(limit) => format!("{}    outage_limit: {limit}\n", cloud.block),
                None => cloud.block.clone(),
            },
        );
    let study = cloud.scratch.study("study.yaml", &text);
    let out = cloud.run(&study);
    assert_success(&out);
    cloud.assert_requests_were_right();
    Some((cloud, name))
}

/// The engine's API down for longer than five polls' worth of a request's own tries (each
/// poll tries 6 times): the job is asked for again, less often each time, and its trial ends
/// as the job did, on its first attempt, nothing failed or cancelled.
#[test]
fn an_engine_that_stops_answering_for_a_while_fails_no_trial() {
    let Some((cloud, name)) = through_an_outage(40, None) else {
        return;
    };
    let trials = cloud.scratch.trials(&name);
    assert_eq!(common::states(&trials), ["succeeded"], "{trials:?}");
    assert_eq!(trials[0]["attempt"].as_i64(), Some(1));
    assert_eq!(cloud.fake.seen(|s| s.created.clone()), [(0, 1)]);
    assert!(cloud.fake.seen(|s| s.cancelled.is_empty()));
    let down = cloud
        .fake
        .seen(|s| s.faults.iter().filter(|f| **f == 503).count());
    assert_eq!(down, 40);
}

/// Past the study's `outage_limit`, the job is cancelled (never left running unwatched) and
/// its trial runs again as a new attempt, the outage not counted as a failure.
#[test]
fn a_job_whose_engine_stays_down_past_the_outage_limit_runs_again() {
    let Some((cloud, name)) = through_an_outage(12, Some("1s")) else {
        return;
    };
    let trials = cloud.scratch.trials(&name);
    assert_eq!(common::states(&trials), ["succeeded"], "{trials:?}");
    assert_eq!(trials[0]["attempt"].as_i64(), Some(2));
    assert_eq!(cloud.fake.seen(|s| s.created.clone()), [(0, 1), (0, 2)]);
    assert_eq!(cloud.fake.seen(|s| s.cancelled.clone()), [(0, 1)]);
    let attempts = cloud.scratch.query(&format!(
        "SELECT a.outcome, a.error FROM attempts a JOIN trials t ON t.id = a.trial_id
         WHERE t.study_id = (SELECT id FROM studies WHERE name = '{name}') ORDER BY a.attempt"
    ));
    assert_eq!(attempts[0][0].as_str(), Some("retried"), "{attempts:?}");
    let error = attempts[0][1].as_str().unwrap_or_default();
    assert!(
        error.contains("has not answered for 1s (trial.executor.outage_limit)"),
        "{error}"
    );
}

#[test]
fn early_stopping_cancels_a_vertex_ai_job() {
    early_stopping_cancels_the_job(Api::Vertex);
}

#[test]
fn early_stopping_deletes_a_kubernetes_job() {
    early_stopping_cancels_the_job(Api::Kubernetes);
}

#[test]
fn early_stopping_stops_a_sagemaker_training_job() {
    early_stopping_cancels_the_job(Api::SageMaker);
}

/// `hptune trial` submits one trial as a job of the study's executor, or runs it here with
/// `--executor local`.
#[test]
fn a_single_trial_is_submitted_by_hand() {
    let Some(cloud) = cloud(Api::Kubernetes, Script::default()) else {
        return;
    };
    let (name, study) = cloud.study("remote-trial");
    let by_hand = |extra: &[&str]| {
        let mut args = vec![
            "trial",
            study.to_str().unwrap(),
            "--param",
            "x=0.5",
            "--param",
            "n=2",
        ];
        args.extend(extra);
        cloud.hptune(&args)
    };
    assert_success(&by_hand(&[]));
    assert_eq!(cloud.fake.seen(|s| s.created.clone()), [(0, 1)]);
    let log = std::fs::read_to_string(
        cloud
            .scratch
            .path(&format!("hptune-logs/{name}/trial-0.log")),
    )
    .unwrap();
    assert!(
        log.contains("runs as the job tuning/hptune-remote-trial-"),
        "{log}"
    );
    // A relay started again for the finished attempt refuses to run its worker.
    let late = cloud.scratch.hptune(&[
        "relay",
        "--study",
        &name,
        "--trial",
        "0",
        "--attempt",
        "1",
        "--metric",
        "loss",
        "--",
        "true",
    ]);
    assert_eq!(late.status.code(), Some(2));
    assert!(
        stderr(&late).contains("trial 0 of study '")
            && stderr(&late).contains("is succeeded at attempt 1: attempt 1 is over"),
        "{}",
        stderr(&late)
    );
    assert_success(&by_hand(&["--executor", "local"]));
    assert_eq!(
        cloud.fake.seen(|s| s.created.len()),
        1,
        "the local trial made no job"
    );
    let trials = cloud.scratch.trials(&name);
    assert_eq!(common::states(&trials), ["succeeded", "succeeded"]);
    assert!(trials.iter().all(|t| t["value"].as_f64() == Some(4.25)));
    let wrong = by_hand(&["--executor", "vertex"]);
    assert_eq!(wrong.status.code(), Some(2));
    assert!(
        stderr(&wrong).contains("--executor vertex: trial.executor configures kubernetes"),
        "{}",
        stderr(&wrong)
    );
}

/// A controller killed while its trials run as jobs loses nothing: the next `hptune run`
/// adopts the recorded jobs (no new job is submitted), reads the measurements their relays
/// wrote meanwhile, and records their ends; with `ttl_passed`, the Jobs end and are deleted
/// before it runs, and the trials are judged by what their relays recorded.
fn killed_controller(ttl_passed: bool) {
    let script = Script {
        ttl_passed,
        ..Script::default()
    };
    let Some(cloud) = cloud(Api::Kubernetes, script) else {
        return;
    };
    let name = common::unique_name("remote-adopt");
    let text = STUDY
        .replace("{name}", &name)
        .replace("max_trial_count: 6", "max_trial_count: 2")
        .replace("  timeout: 5m", "  timeout: 5m\n  env: {SLEEP: '3'}")
        .replace("{block}", &cloud.block);
    let study = cloud.scratch.study("study.yaml", &text);
    let mut first = cloud
        .scratch
        .command(&["run", study.to_str().unwrap()])
        .envs(cloud.env.iter().cloned())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Both jobs run: their handles are recorded and their relays have sent a heartbeat.
    let recorded = format!(
        "SELECT COUNT(*) FROM trials t JOIN attempts a ON a.trial_id = t.id AND a.attempt = t.attempt
         WHERE t.worker IS NOT NULL AND a.heartbeat_at IS NOT NULL
         AND t.study_id = (SELECT id FROM studies WHERE name = '{name}')"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while cloud.scratch.query(&recorded)[0][0] != 2 {
        assert!(std::time::Instant::now() < deadline, "the jobs never ran");
        std::thread::sleep(Duration::from_millis(100));
    }
    first.kill().unwrap();
    first.wait().unwrap();
    if ttl_passed {
        let finals = format!(
            "SELECT COUNT(*) FROM measurements m JOIN trials t ON t.id = m.trial_id
             WHERE m.step IS NULL AND t.study_id = (SELECT id FROM studies WHERE name = '{name}')"
        );
        while cloud.scratch.query(&finals)[0][0] != 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "the relays never finished"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        // The relays are done and their Jobs are gone (each relay exits just after its row).
        std::thread::sleep(Duration::from_millis(500));
    }
    let out = cloud.run(&study);
    assert_success(&out);
    let mut created = cloud.fake.seen(|s| s.created.clone());
    created.sort();
    assert_eq!(
        created,
        [(0, 1), (1, 1)],
        "the jobs were adopted, not submitted again"
    );
    let trials = cloud.scratch.trials(&name);
    assert_eq!(common::states(&trials), ["succeeded", "succeeded"]);
    for trial in &trials {
        let value = trial["value"].as_f64().unwrap();
        assert!((value - expected_loss(trial)).abs() < 1e-9, "{trial}");
        // The model location recorded with the job's handle stays with the adopted trial.
        let model = format!("pvc://models/{name}/trial-{}", trial["number"]);
        assert_eq!(
            trial["artifact_dir"].as_str(),
            Some(model.as_str()),
            "{trial}"
        );
        assert_eq!(trial["artifact_removed_at"], Value::Null, "{trial}");
    }
    cloud.assert_requests_were_right();
}

#[test]
fn a_killed_controller_s_running_jobs_are_adopted() {
    killed_controller(false);
}

#[test]
fn a_killed_controller_s_deleted_jobs_are_judged_by_their_relay_s_records() {
    killed_controller(true);
}

/// Without a key file, Vertex's token comes from the metadata server (`GCE_METADATA_HOST`).
#[test]
fn vertex_takes_its_token_from_the_metadata_server() {
    let Some(mut cloud) = cloud(Api::Vertex, Script::default()) else {
        return;
    };
    cloud.env = vec![(
        "GCE_METADATA_HOST".into(),
        cloud.fake.url.trim_start_matches("http://").to_string(),
    )];
    let (name, study) = cloud.study("remote-metadata");
    let out = cloud.hptune(&[
        "trial",
        study.to_str().unwrap(),
        "--param",
        "x=1",
        "--param",
        "n=1",
    ]);
    assert_success(&out);
    assert_eq!(cloud.fake.seen(|s| s.tokens_issued), 1, "one token, cached");
    cloud.assert_requests_were_right();
    assert_eq!(cloud.scratch.trials(&name)[0]["value"].as_f64(), Some(2.0));
}

/// Without credentials in any of the engine's usual places, the study is refused before a
/// job is submitted, with a message that says where they were looked for.
#[test]
fn missing_credentials_are_bad_input() {
    for (api, expected) in [
        (Api::Kubernetes, "no Kubernetes credentials: set KUBECONFIG"),
        (Api::SageMaker, "no AWS credentials: set AWS_ACCESS_KEY_ID"),
    ] {
        let Some(mut cloud) = cloud(api, Script::default()) else {
            return;
        };
        let nowhere = cloud.scratch.path("nowhere").display().to_string();
        cloud.env = vec![
            ("KUBECONFIG".into(), nowhere.clone()),
            ("AWS_SHARED_CREDENTIALS_FILE".into(), nowhere),
            (
                "HOME".into(),
                cloud.scratch.dir.path().display().to_string(),
            ),
        ];
        let (_, study) = cloud.study("remote-no-credentials");
        let out = cloud.run(&study);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains(expected), "{}", stderr(&out));
        assert!(cloud.fake.seen(|s| s.requests.is_empty()));
    }
}

/// A remote executor with a SQLite storage is refused before anything runs: its jobs could
/// not reach the file.
#[test]
fn remote_executors_refuse_a_sqlite_storage() {
    let scratch = Scratch::new();
    let study = scratch.study(
        "study.yaml",
        &STUDY.replace("{name}", "s").replace(
            "{block}",
            "    kind: vertex\n    project: p\n    region: r\n    image: i\n    machine_type: m\n",
        ),
    );
    let out = scratch.hptune(&["run", study.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out)
            .contains("the vertex executor needs a PostgreSQL storage that its jobs can reach"),
        "{}",
        stderr(&out)
    );
    let relay = scratch.hptune(&[
        "relay",
        "--study",
        "s",
        "--trial",
        "0",
        "--attempt",
        "1",
        "--metric",
        "loss",
        "--",
        "true",
    ]);
    common::assert_exit_says(&relay, 2, "the relay writes to PostgreSQL");
}

/// A Kubernetes study that names a Secret for the storage URL submits Jobs whose
/// `HPTUNE_STORAGE` is a `secretKeyRef` to it: neither the URL nor its password is in any
/// request, and the relay in the job, given the Secret's value, records the trial.
#[test]
fn a_kubernetes_job_takes_the_storage_url_from_a_secret() {
    let Some(postgres) = common::test_postgres() else {
        return;
    };
    let script = Script {
        secrets: HashMap::from([(
            ("hptune-db".to_string(), "url".to_string()),
            postgres.clone(),
        )]),
        ..Script::default()
    };
    let Some(mut cloud) = cloud(Api::Kubernetes, script) else {
        return;
    };
    cloud
        .block
        .push_str("    storage_secret: {name: hptune-db, key: url}\n");
    let (name, study) = cloud.study("remote-secret");
    let out = cloud.hptune(&[
        "trial",
        study.to_str().unwrap(),
        "--param",
        "x=0.5",
        "--param",
        "n=2",
    ]);
    assert_success(&out);
    cloud.assert_requests_were_right();
    assert_eq!(cloud.scratch.trials(&name)[0]["value"].as_f64(), Some(4.25));
    let bodies = cloud.fake.seen(|s| s.bodies.clone());
    let jobs: Vec<Value> = bodies
        .iter()
        .filter_map(|body| serde_json::from_str::<Value>(body).ok())
        .filter(|body| body["kind"] == "Job")
        .collect();
    assert_eq!(jobs.len(), 1, "{bodies:#?}");
    let env = jobs[0]["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap();
    let storage: Vec<&Value> = env
        .iter()
        .filter(|e| e["name"] == "HPTUNE_STORAGE")
        .collect();
    assert_eq!(
        storage,
        [
            &serde_json::json!({"name": "HPTUNE_STORAGE", "valueFrom": {"secretKeyRef": {"name": "hptune-db", "key": "url"}}})
        ]
    );
    for body in &bodies {
        assert!(!body.contains(&postgres), "the URL was sent: {body}");
        for secret in &cloud.secrets {
            assert!(!body.contains(secret.as_str()), "{secret} was sent: {body}");
        }
    }
}

/// `storage_secret` belongs to the Kubernetes executor, and names a Secret and a key as the
/// API server would accept them.
#[test]
fn a_storage_secret_is_checked_before_anything_runs() {
    let scratch = Scratch::new();
    let vertex = "    kind: vertex\n    project: p\n    region: r\n    image: i\n    machine_type: m\n    storage_secret: {name: db, key: url}\n";
    let kubernetes =
        "    kind: kubernetes\n    image: i\n    storage_secret: {name: Hptune_DB, key: 'u rl'}\n";
    for (block, expected) in [
        (
            vertex,
            &["trial.executor.storage_secret: does not apply to the vertex executor"][..],
        ),
        (
            kubernetes,
            &[
                "trial.executor.storage_secret.name: 'Hptune_DB' is not a Secret's name",
                "trial.executor.storage_secret.key: 'u rl' is not a key of a Secret",
            ],
        ),
    ] {
        let study = scratch.study(
            "study.yaml",
            &STUDY.replace("{name}", "s").replace("{block}", block),
        );
        let out = scratch.hptune(&["run", study.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        for expected in expected {
            assert!(stderr(&out).contains(expected), "{}", stderr(&out));
        }
    }
}

/// A study of one trial of the checkpointing worker on spot capacity: `spot` is the engine's
/// spot fields, added to the executor block.
const SPOT_STUDY: &str = r#"
name: {name}
objective: {metric: loss, goal: minimize}
parameters:
  - {id: x, type: discrete, values: [0.5]}
max_trial_count: 1
trial:
  command: [sh, '{worker}']
  env: {STEPS: '8', SLEEP: '0.3', STARTS: '{starts}'}
  timeout: 5m
  executor:
{block}{spot}
"#;

/// The engine's spot fields in a study file, and what its API must receive of them.
fn spot_of(api: Api) -> (&'static str, Value) {
    match api {
        Api::Vertex => ("    spot: true\n", serde_json::json!({"strategy": "SPOT"})),
        Api::Kubernetes => (
            "    tolerations:\n      - {key: cloud.google.com/gke-spot, operator: Equal, value: 'true', effect: NoSchedule}\n",
            serde_json::json!({"tolerations": [{"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]}),
        ),
        Api::SageMaker => (
            "    spot: true\n    max_wait: 1h\n",
            serde_json::json!({
                "EnableManagedSpotTraining": true,
                "MaxWaitTimeInSeconds": 3600,
                "CheckpointConfig": {"S3Uri": "s3://bucket/hptune/{name}/trial-0/checkpoints", "LocalPath": "/opt/ml/checkpoints"},
            }),
        ),
    }
}

/// On spot capacity, a job whose machine is taken away after it wrote a checkpoint is
/// retried, and its next job resumes from that checkpoint: the engine received the spot and
/// checkpoint fields as its API documents them.
fn a_preempted_spot_job_resumes_from_its_checkpoint(api: Api) {
    let script = Script {
        preempt: vec![0],
        preempt_after_checkpoint: true,
        ..Script::default()
    };
    let Some(cloud) = cloud(api, script) else {
        return;
    };
    let name = common::unique_name("spot");
    let (fields, expected) = spot_of(api);
    let worker =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/workers/checkpointed.sh");
    let starts = cloud.scratch.path("starts.txt");
    let text = SPOT_STUDY
        .replace("{name}", &name)
        .replace("{worker}", &worker.display().to_string())
        .replace("{starts}", &starts.display().to_string())
        .replace("{block}", &cloud.block)
        .replace("{spot}", fields);
    let study = cloud.scratch.study("spot.yaml", &text);
    assert_success(&cloud.run(&study));
    cloud.assert_requests_were_right();

    let expected: Value =
        serde_json::from_str(&expected.to_string().replace("{name}", &name)).unwrap();
    let seen = cloud.fake.seen(|s| s.spot.clone());
    assert_eq!(seen.len(), 2, "two jobs: {seen:?}");
    for (_, _, fields) in &seen {
        assert_eq!(fields, &expected);
    }
    let trials = cloud.scratch.trials(&name);
    assert_eq!(trials[0]["state"], "succeeded", "{trials:?}");
    assert_eq!(trials[0]["resumed"][0]["attempt"], 2, "{trials:?}");
    let starts = std::fs::read_to_string(&starts).unwrap();
    let first_steps: Vec<&str> = starts
        .lines()
        .map(|l| l.rsplit(' ').next().unwrap())
        .collect();
    assert_eq!(first_steps[0], "1", "{starts}");
    assert_ne!(first_steps[1], "1", "the second job resumed: {starts}");
    assert_eq!(
        trials[0]["resumed"][0]["at_step"].to_string(),
        first_steps[1],
        "{trials:?}"
    );
}

#[test]
fn a_preempted_vertex_ai_spot_job_resumes_from_its_checkpoint() {
    a_preempted_spot_job_resumes_from_its_checkpoint(Api::Vertex);
}

#[test]
fn a_preempted_kubernetes_job_on_a_spot_pool_resumes_from_its_checkpoint() {
    a_preempted_spot_job_resumes_from_its_checkpoint(Api::Kubernetes);
}

#[test]
fn an_interrupted_sagemaker_spot_job_resumes_from_its_checkpoint() {
    a_preempted_spot_job_resumes_from_its_checkpoint(Api::SageMaker);
}
