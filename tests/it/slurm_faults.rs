//! Studies on the real Slurm cluster of the tests (`scripts/start-slurm.sh`) while the cluster
//! itself fails: its controller restarted mid-trial, its one node drained. These tests take
//! the whole cluster away from every other job, so each holds it alone
//! ([`common::slurm_alone`]) while the other Slurm tests of this binary hold it shared; each
//! puts the cluster back as it found it, even when it fails. Skipped where no cluster
//! answers, unless `HPTUNE_TEST_SLURM=required`.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Scratch, assert_exit_says, assert_success, expected_loss, test_slurm};

/// A study of one quadratic trial whose worker sleeps `{sleep}` seconds, as a Slurm job;
/// `{trial}` is more of the `trial` block.
const STUDY: &str = r#"
name: {name}
objective: {metric: loss, goal: minimize}
parameters:
  - {id: x, type: double, min: -2.0, max: 2.0}
  - {id: y, type: double, min: -2.0, max: 2.0}
algorithm: random
max_trial_count: 1
max_failed_trial_count: 1
trial:
  command: [{worker}]
  env: {SLEEP: '{sleep}'}
  executor: {kind: slurm, poll_interval: 200ms}
{trial}"#;

/// The study file of [`STUDY`] with these values.
fn study(name: &str, sleep: u32, trial: &str) -> String {
    STUDY
        .replace("{name}", name)
        .replace("{sleep}", &sleep.to_string())
        .replace("{trial}", trial)
}

/// Waits until `ready` holds, for at most `limit`.
fn wait_until(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ready() {
        assert!(Instant::now() < deadline, "waited {limit:?} for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What `program ARGS` printed, if it succeeded.
fn printed(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The value of `key` in `scontrol show config`.
fn config(key: &str) -> String {
    let config = printed("scontrol", &["show", "config"]).expect("scontrol show config");
    config
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no {key} in scontrol show config"))
}

/// The one node of the cluster.
fn node() -> String {
    printed("sinfo", &["--noheader", "--format=%N"])
        .expect("sinfo")
        .trim()
        .to_string()
}

/// The state of job `id` (`scontrol show job`), once Slurm answers.
fn job_state(id: u64) -> String {
    printed("scontrol", &["show", "job", &id.to_string()])
        .unwrap_or_default()
        .split_whitespace()
        .find_map(|w| w.strip_prefix("JobState="))
        .unwrap_or_default()
        .to_string()
}

/// The Slurm job id of a trial, from its recorded handle.
fn job_id(trial: &serde_json::Value) -> u64 {
    trial["worker"]
        .as_str()
        .and_then(|h| h.strip_prefix("slurm:"))
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("not a Slurm job's handle: {trial}"))
}

/// Slurm's controller, stopped until this is dropped: then started again with its saved
/// state (its jobs), and its node back to work.
struct ControllerDown {
    pid_file: String,
}

impl ControllerDown {
    /// Stops slurmctld (the process of its pid file) and waits until it is gone.
    fn stop() -> Self {
        let pid_file = config("SlurmctldPidFile");
        let pid = std::fs::read_to_string(&pid_file).expect("slurmctld's pid file");
        let pid = pid.trim().to_string();
        assert!(Command::new("kill").arg(&pid).status().unwrap().success());
        wait_until("slurmctld to stop", Duration::from_secs(60), || {
            !Path::new(&format!("/proc/{pid}")).exists()
        });
        Self { pid_file }
    }
}

impl Drop for ControllerDown {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.pid_file);
        // Without -c: the jobs of the state it saved are still its jobs.
        let started = Command::new("slurmctld").stdin(Stdio::null()).status();
        assert!(
            started.is_ok_and(|s| s.success()),
            "slurmctld did not start"
        );
        wait_until("slurmctld to answer", Duration::from_secs(60), || {
            printed("scontrol", &["ping"]).is_some_and(|p| p.contains("UP"))
        });
        node_ready();
    }
}

/// Waits until the node takes jobs again.
fn node_ready() {
    wait_until("the node to take jobs", Duration::from_secs(60), || {
        printed("sinfo", &["--noheader", "--format=%T"]).is_some_and(|state| {
            ["idle", "mixed", "allocated"]
                .iter()
                .any(|ready| state.trim().starts_with(ready))
        })
    });
}

/// The node of the cluster, drained until this is dropped.
struct NodeDrained(String);

impl NodeDrained {
    fn drain() -> Self {
        let node = node();
        let update = ["update", &format!("NodeName={node}"), "State=DRAIN"];
        let drained = Command::new("scontrol")
            .args(update)
            .arg("Reason=hptune test")
            .status();
        assert!(drained.is_ok_and(|s| s.success()), "cannot drain {node}");
        Self(node)
    }
}

impl Drop for NodeDrained {
    fn drop(&mut self) {
        let node = format!("NodeName={}", self.0);
        let _ = Command::new("scontrol")
            .args(["update", &node, "State=RESUME"])
            .status();
        node_ready();
    }
}

#[test]
fn a_controller_restart_mid_trial_neither_fails_the_trial_nor_leaves_its_job_unwatched() {
    let _cluster = common::slurm_alone();
    if test_slurm().is_none() {
        return;
    }
    let scratch = Scratch::new();
    // The worker runs on through the controller's outage, longer than the ~90 s that five
    // failing `scontrol` calls take (each waits ~18 s for a controller that is not there).
    let path = scratch.study("study.yaml", &study("outage", 100, ""));
    let run = scratch
        .command(&["run", path.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let running = || {
        scratch
            .try_query("SELECT worker FROM trials WHERE worker IS NOT NULL")
            .unwrap_or_default()
            .first()
            .and_then(|row| row[0].as_str()?.strip_prefix("slurm:")?.parse::<u64>().ok())
            .filter(|id| job_state(*id) == "RUNNING")
    };
    wait_until("a running job", Duration::from_secs(60), || {
        running().is_some()
    });
    let id = running().unwrap();
    // slurmctld says RUNNING once it has sent the launch to slurmd; a controller stopped
    // before slurmd has it loses the launch, and the job stays RUNNING with no process. The
    // job's log file is slurmd's: the worker has started.
    let log = scratch.path("hptune-logs/outage/trial-0.log");
    wait_until("the job's log file", Duration::from_secs(60), || {
        log.exists()
    });
    {
        let _down = ControllerDown::stop();
        std::thread::sleep(Duration::from_secs(95));
    }
    let out = run.wait_with_output().unwrap();
    assert_success(&out);
    let trial = &scratch.trials("outage")[0];
    assert_eq!(trial["state"], "succeeded", "{trial}");
    assert_eq!(trial["attempt"], 1, "{trial}");
    assert_eq!(job_id(trial), id);
    assert!((trial["value"].as_f64().unwrap() - expected_loss(trial)).abs() < 1e-9);
    // The job ran to its end, watched, and is not running any more.
    wait_until("the job's end", Duration::from_secs(60), || {
        job_state(id) == "COMPLETED"
    });
}

#[test]
fn a_job_pending_on_a_drained_node_times_out_saying_it_never_started() {
    let _cluster = common::slurm_alone();
    if test_slurm().is_none() {
        return;
    }
    let _drained = NodeDrained::drain();
    let scratch = Scratch::new();
    let path = scratch.study("study.yaml", &study("drained", 1, "  timeout: 3s\n"));
    let out = scratch.hptune(&["run", path.to_str().unwrap()]);
    assert_exit_says(&out, 1, "1 trials failed");
    let trial = &scratch.trials("drained")[0];
    assert_eq!(trial["state"], "failed", "{trial}");
    let error = trial["error"].as_str().unwrap();
    assert!(
        error.starts_with(
            "timed out after 3s (trial.timeout) before it ever started: Slurm kept its job pending ("
        ) && !error.contains("pending ()"),
        "{error}"
    );
    wait_until("the job's end", Duration::from_secs(60), || {
        job_state(job_id(trial)) == "CANCELLED"
    });
}
