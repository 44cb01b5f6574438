//! `executor: {kind: slurm}` against a real Slurm cluster (`scripts/start-slurm.sh`: one
//! machine, four fake GPUs): every trial attempt is one `sbatch` job, its output read through
//! the filesystem the job shares with the controller. Skipped where no cluster answers,
//! unless `HPTUNE_TEST_SLURM=required`. Each test holds the cluster shared
//! ([`common::slurm_shared`]): the tests of `slurm_faults` never take it down under one.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{Scratch, assert_exit_says, assert_success, expected_loss, stderr, test_slurm};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

/// A study of `{trials}` quadratic trials, `{parallel}` at once, as Slurm jobs with
/// `{executor}` added to the block; `{env}` is `trial.env`.
const STUDY: &str = r#"
name: {name}
objective: {metric: loss, goal: minimize}
parameters:
  - {id: x, type: double, min: -2.0, max: 2.0}
  - {id: y, type: double, min: -2.0, max: 2.0}
algorithm: random
max_trial_count: {trials}
parallel_trial_count: {parallel}
max_failed_trial_count: 1
seed: 3
trial:
  command: [{worker}]
  env: {env}
  executor: {kind: slurm, poll_interval: 200ms{executor}}
"#;

/// The study file of [`STUDY`] with these values.
fn study(name: &str, trials: u32, parallel: u32, env: &str, executor: &str) -> String {
    STUDY
        .replace("{name}", name)
        .replace("{trials}", &trials.to_string())
        .replace("{parallel}", &parallel.to_string())
        .replace("{env}", env)
        .replace("{executor}", executor)
}

/// Runs `hptune run` on the study file `text` in a new scratch directory; `None` where no
/// Slurm cluster answers.
fn run_on_slurm(text: &str) -> Option<(Scratch, Output)> {
    test_slurm()?;
    let scratch = Scratch::new();
    let path = scratch.study("study.yaml", text);
    let out = scratch.hptune(&["run", path.to_str().unwrap()]);
    Some((scratch, out))
}

/// `scontrol show job ID`'s fields.
fn slurm_job(id: u64) -> HashMap<String, String> {
    let out = Command::new("scontrol")
        .args(["show", "job", "--oneliner", &id.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "Slurm knows no job {id}");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The state job `id` ends in: hptune may see a worker's exit status before Slurm has
/// finished the job, which then is still COMPLETING for a moment.
fn final_state(id: u64) -> String {
    let mut state = String::new();
    wait_until("the job's end", || {
        state = slurm_job(id)["JobState"].clone();
        !matches!(state.as_str(), "RUNNING" | "COMPLETING")
    });
    state
}

/// The Slurm job id of a trial's last attempt, from its recorded handle.
fn job_id(trial: &Value) -> u64 {
    let handle = trial["worker"].as_str().unwrap_or_default();
    handle
        .strip_prefix("slurm:")
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("not a Slurm job's handle: {trial}"))
}

/// Whether `squeue` lists the job among those pending or running.
fn in_queue(id: u64) -> bool {
    let out = Command::new("squeue")
        .args(["--noheader", "--format=%i", &format!("--jobs={id}")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == id.to_string()
}

/// Checks that job `id` was cancelled, and is neither queued nor running any more.
fn assert_cancelled(id: u64) {
    assert!(!in_queue(id), "job {id} is still queued or running");
    assert_eq!(slurm_job(id)["JobState"], "CANCELLED");
}

/// A study on Slurm whose submissions and worker starts are counted.
struct Counted {
    scratch: Scratch,
    /// The study file.
    path: PathBuf,
    /// PATH with the counting `sbatch` first.
    env_path: PathBuf,
    /// One line per job submitted.
    submissions: PathBuf,
    /// One line per worker started: study, trial, attempt.
    starts: PathBuf,
}

impl Counted {
    /// A [`STUDY`] named `name` of `trials` trials, `parallel` at once, whose workers
    /// sleep `sleep` seconds; `None` where no Slurm cluster answers.
    fn new(name: &str, trials: u32, parallel: u32, sleep: &str) -> Option<Self> {
        test_slurm()?;
        Some(Self::in_scratch(
            Scratch::new(),
            name,
            trials,
            parallel,
            sleep,
            "",
        ))
    }

    /// [`Counted::new`] in `scratch`, with `executor` added to the Slurm block.
    fn in_scratch(
        scratch: Scratch,
        name: &str,
        trials: u32,
        parallel: u32,
        sleep: &str,
        executor: &str,
    ) -> Self {
        let (env_path, submissions) = counting_sbatch(&scratch);
        let starts = scratch.path("starts");
        let env = format!("{{SLEEP: '{sleep}', STARTS: '{}'}}", starts.display());
        let text = study(name, trials, parallel, &env, executor);
        let path = scratch.study("study.yaml", &text);
        Self {
            scratch,
            path,
            env_path,
            submissions,
            starts,
        }
    }

    /// Starts `hptune run` on the study in the background.
    fn start(&self) -> Child {
        self.run().stderr(Stdio::null()).spawn().unwrap()
    }

    /// Runs `hptune run` on the study to its end, which must be a success.
    fn finish(&self) -> Output {
        let out = self.run().output().unwrap();
        assert_success(&out);
        out
    }

    /// `hptune run` on the study, with the counting `sbatch` first on PATH.
    fn run(&self) -> Command {
        let mut command = self.scratch.command(&["run", self.path.to_str().unwrap()]);
        command.env("PATH", &self.env_path);
        command
    }
}

/// A directory holding an `sbatch` that appends each submission to `submissions` and then
/// runs the real one: put first on PATH (the PATH returned), it counts the jobs hptune
/// submits.
fn counting_sbatch(scratch: &Scratch) -> (PathBuf, PathBuf) {
    let bin = scratch.path("bin");
    std::fs::create_dir(&bin).unwrap();
    let log = scratch.path("submissions");
    let real = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v sbatch"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    // With the file `kill-controller` in the scratch directory, it submits the job, then
    // SIGKILLs the controller (its parent) before it can read the job's id.
    let script = format!(
        "#!/bin/sh\necho \"$*\" >> '{log}'\n\
         if [ -e '{kill}' ]; then rm '{kill}'; '{real}' \"$@\" >/dev/null; kill -KILL $PPID; exit 1; fi\n\
         exec '{real}' \"$@\"\n",
        log = log.display(),
        kill = scratch.path("kill-controller").display(),
        real = real.trim()
    );
    std::fs::write(bin.join("sbatch"), script).unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(bin.join("sbatch"))
        .status()
        .unwrap();
    // `hptune` itself too: the program of the jobs that report through the database.
    let hptune = Path::new(env!("CARGO_BIN_EXE_hptune")).parent().unwrap();
    let path = format!(
        "{}:{}:{}",
        bin.display(),
        hptune.display(),
        std::env::var("PATH").unwrap()
    );
    (PathBuf::from(path), log)
}

/// Checks that nothing of the study was recorded.
fn assert_no_study(scratch: &Scratch, name: &str) {
    let out = scratch.hptune(&["trials", name]);
    assert_exit_says(&out, 2, &format!("no study named '{name}'"));
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// A worker script in the scratch directory that appends the line `note` (shell words, expanded
/// in the job) to `notes`, then runs the test worker.
fn noting_worker(scratch: &Scratch, note: &str, notes: &Path) -> PathBuf {
    let wrapper = scratch.path("wrapper.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"{note}\" >> '{}'\nexec '{}' \"$@\"\n",
            notes.display(),
            common::worker()
        ),
    )
    .unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(&wrapper)
        .status()
        .unwrap();
    wrapper
}

#[test]
fn a_study_runs_to_completion_as_slurm_jobs_on_distinct_gpus() {
    let _cluster = common::slurm_shared();
    let Some(partition) = test_slurm() else {
        return;
    };
    let scratch = Scratch::new();
    let name = common::unique_name("slurm");
    let gpus = scratch.path("gpus");
    // Each worker notes its trial, the GPU Slurm gave it and when it began; the quadratic
    // worker notes when it ended (TRACE).
    let wrapper = noting_worker(
        &scratch,
        "$HPTUNE_TRIAL_ID $CUDA_VISIBLE_DEVICES $(date +%s.%N)",
        &gpus,
    );
    let trace = scratch.path("trace");
    let text = study(
        &name,
        12,
        3,
        &format!("{{SLEEP: '1', TRACE: '{}'}}", trace.display()),
        &format!(", partition: {partition}, gpus: 1, cpus_per_task: 1, mem: 100M, time: 10m"),
    )
    .replace("{worker}", wrapper.to_str().unwrap());
    let path = scratch.study("study.yaml", &text);
    let out = scratch.hptune(&["run", path.to_str().unwrap()]);
    assert_success(&out);

    let trials = scratch.trials(&name);
    assert_eq!(trials.len(), 12);
    let mut ids = HashSet::new();
    for trial in &trials {
        assert_eq!(trial["state"], "succeeded", "{trial}");
        assert!((trial["value"].as_f64().unwrap() - expected_loss(trial)).abs() < 1e-9);
        // The recorded job is this attempt's, in Slurm's own records.
        let id = job_id(trial);
        assert!(ids.insert(id), "job {id} recorded twice");
        let job = slurm_job(id);
        assert_eq!(final_state(id), "COMPLETED", "{job:?}");
        assert_eq!(
            job["JobName"],
            format!("hptune-{name}-{}-1", trial["number"])
        );
        assert_eq!(job["Partition"], partition);
        let log = scratch.path(trial["log_path"].as_str().unwrap());
        assert_eq!(Path::new(&job["StdOut"]), log);
    }
    // The best trial shown is the one of least loss.
    let best = trials
        .iter()
        .min_by(|a, b| {
            a["value"]
                .as_f64()
                .unwrap()
                .total_cmp(&b["value"].as_f64().unwrap())
        })
        .unwrap();
    let shown = scratch.hptune(&["best", &name, "--format", "json"]);
    assert_success(&shown);
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["params"], best["params"], "{shown}");

    // Jobs that ran at the same time had GPUs of their own, and every GPU was used.
    let began: HashMap<String, (String, f64)> = lines(&gpus)
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[0].to_string(), (f[1].to_string(), f[2].parse().unwrap()))
        })
        .collect();
    let ended: HashMap<String, f64> = lines(&trace)
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[0].to_string(), f[2].parse().unwrap())
        })
        .collect();
    assert_eq!((began.len(), ended.len()), (12, 12));
    let mut overlaps = 0;
    for (a, (gpu_a, start_a)) in &began {
        assert!(!gpu_a.is_empty(), "trial {a} got no GPU");
        for (b, (gpu_b, start_b)) in &began {
            if a < b && *start_a < ended[b] && *start_b < ended[a] {
                overlaps += 1;
                assert_ne!(
                    gpu_a, gpu_b,
                    "trials {a} and {b} ran at once on GPU {gpu_a}"
                );
            }
        }
    }
    assert!(overlaps > 0, "no two jobs ran at once");
    let used: HashSet<&String> = began.values().map(|(gpu, _)| gpu).collect();
    assert!(used.len() >= 3, "GPUs used: {used:?}");
}

/// `executor.gpus: 0.25` asks Slurm for 4 of the 16 shards of a GPU (`--gres=shard:4`), so
/// that 4 jobs share each GPU: with 4 GPUs, more jobs run at once than there are GPUs.
#[test]
fn a_share_of_a_gpu_is_slurm_shards_and_jobs_share_the_gpus() {
    let _cluster = common::slurm_shared();
    let Some(partition) = test_slurm() else {
        return;
    };
    let scratch = Scratch::new();
    let name = common::unique_name("slurm-shards");
    let began = scratch.path("began");
    let wrapper = noting_worker(&scratch, "$HPTUNE_TRIAL_ID $(date +%s.%N)", &began);
    let trace = scratch.path("trace");
    let text = study(
        &name,
        8,
        8,
        &format!("{{SLEEP: '3', TRACE: '{}'}}", trace.display()),
        &format!(", partition: {partition}, gpus: 0.25, cpus_per_task: 1, mem: 100M, time: 10m"),
    )
    .replace("{worker}", wrapper.to_str().unwrap());
    let path = scratch.study("study.yaml", &text);
    let out = scratch.hptune(&["run", path.to_str().unwrap()]);
    assert_success(&out);

    let trials = scratch.trials(&name);
    assert_eq!(trials.len(), 8);
    for trial in &trials {
        assert_eq!(trial["state"], "succeeded", "{trial}");
        let id = job_id(trial);
        let job = slurm_job(id);
        assert_eq!(final_state(id), "COMPLETED", "{job:?}");
        // Slurm's own record of what the job asked for: 4 shards, no whole GPU.
        assert_eq!(job["TresPerNode"], "gres:shard:4", "{job:?}");
    }

    // The most jobs that ran at one moment: more than the cluster's 4 GPUs, which whole-GPU
    // jobs could not be.
    let span = |path: &Path, field: usize| -> HashMap<String, f64> {
        lines(path)
            .iter()
            .map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                (f[0].to_string(), f[field].parse().unwrap())
            })
            .collect()
    };
    let (started, ended) = (span(&began, 1), span(&trace, 2));
    assert_eq!((started.len(), ended.len()), (8, 8));
    let most = started
        .values()
        .map(|&moment| {
            started
                .iter()
                .filter(|&(trial, &start)| start <= moment && moment < ended[trial])
                .count()
        })
        .max()
        .unwrap();
    assert!(most > 4, "at most {most} jobs ran at once on 4 GPUs");
}

#[test]
fn parameters_and_environment_reach_the_job_whatever_they_hold() {
    let _cluster = common::slurm_shared();
    if test_slurm().is_none() {
        return;
    }
    let scratch = Scratch::new();
    let values = ["it's $HOME", "say \"hi\" `id` $(id) \\ ;"];
    let text = format!(
        r#"
name: quoting
objective: {{metric: loss, goal: minimize}}
parameters:
  - {{id: tag, type: categorical, values: ['{}', '{}']}}
algorithm: grid
trial:
  command: [sh, -c, 'printf "%s|%s" "$1" "$GREETING" > "out-$HPTUNE_TRIAL_ID"; echo loss=1', sh]
  args: ['{{tag}}']
  env: {{GREETING: "a 'b' $c"}}
  executor: {{kind: slurm, poll_interval: 200ms}}
"#,
        values[0].replace('\'', "''"),
        values[1].replace('\'', "''"),
    );
    let path = scratch.study("study.yaml", &text);
    assert_success(&scratch.hptune(&["run", path.to_str().unwrap()]));
    for trial in scratch.trials("quoting") {
        assert_eq!(trial["state"], "succeeded", "{trial}");
        let written = std::fs::read_to_string(scratch.path(&format!("out-{}", trial["number"])));
        assert_eq!(
            written.unwrap(),
            format!("{}|a 'b' $c", trial["params"]["tag"].as_str().unwrap())
        );
    }
}

#[test]
fn a_failing_job_is_recorded_failed_with_its_error() {
    let _cluster = common::slurm_shared();
    let Some((scratch, out)) = run_on_slurm(&study("failing", 1, 1, "{MODE: fail}", "")) else {
        return;
    };
    assert_failed_with_the_workers_error(&scratch, &out, "failing");
}

/// Checks that the one trial of `study` (run by `out`), whose worker ran with `MODE: fail`,
/// failed with its exit code and its last line of output, and that its job ended FAILED.
fn assert_failed_with_the_workers_error(scratch: &Scratch, out: &Output, study: &str) {
    assert_exit_says(out, 1, "1 trials failed");
    let trial = &scratch.trials(study)[0];
    assert_eq!(trial["state"], "failed");
    let error = trial["error"].as_str().unwrap();
    assert!(
        error.contains("exited with code 3") && error.contains("ValueError: bad things happened"),
        "{error}"
    );
    assert_eq!(final_state(job_id(trial)), "FAILED");
    remove_node_outputs(study);
}

#[test]
fn a_trial_that_times_out_has_its_job_cancelled() {
    let _cluster = common::slurm_shared();
    let text = study("slow", 1, 1, "{SLEEP: '600'}", "")
        .replace("  env:", "  timeout: 2s\n  grace_period: 30s\n  env:");
    let Some((scratch, out)) = run_on_slurm(&text) else {
        return;
    };
    assert_exit_says(&out, 1, "timed out");
    let trial = &scratch.trials("slow")[0];
    assert_eq!(trial["state"], "failed");
    assert_cancelled(job_id(trial));
}

#[test]
fn an_early_stopped_trial_has_its_job_cancelled() {
    let _cluster = common::slurm_shared();
    if test_slurm().is_some() {
        early_stopped(&Scratch::new(), "stopping", "");
    }
}

#[test]
fn an_early_stopped_trial_that_reports_through_the_database_has_its_job_cancelled() {
    let _cluster = common::slurm_shared();
    if let (Some(_), Some(url)) = (test_slurm(), common::test_postgres()) {
        let name = common::unique_name("stopping-db");
        early_stopped(&Scratch::on_postgres(&url), &name, ", report: database");
    }
}

/// Runs the study `name` of two trials, the second early-stopped, with `executor` added to
/// its Slurm block: the stopped trial's job ends CANCELLED.
fn early_stopped(scratch: &Scratch, name: &str, executor: &str) {
    let dir = scratch.path("curves");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("curve-1.txt"), "1\n1\n").unwrap();
    std::fs::write(dir.join("curve-2.txt"), "9\n9\n9\n9\n9\n9\n9\n9\n9\n9\n").unwrap();
    let worker = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/workers/curve.sh");
    let text = format!(
        r#"
name: {name}
objective: {{metric: loss, goal: minimize}}
parameters:
  - {{id: q, type: discrete, values: [1, 2]}}
algorithm: grid
parallel_trial_count: 1
early_stopping: {{rule: median, min_steps: 1, min_trials: 1}}
trial:
  command: [{}]
  env: {{CURVE_DIR: '{}', STEP_SLEEP: '1'}}
  executor: {{kind: slurm, poll_interval: 200ms{executor}}}
"#,
        worker.display(),
        dir.display()
    );
    let path = scratch.study("study.yaml", &text);
    let out = with_hptune_on_path(scratch, &["run", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_success(&out);
    let trials = scratch.trials(name);
    assert_eq!(trials[0]["state"], "succeeded", "{trials:?}");
    assert_eq!(trials[1]["state"], "stopped", "{trials:?}");
    let id = job_id(&trials[1]);
    match executor.contains("report: database") {
        // The remote executor cancels the job and records the stop without waiting for it.
        true => assert_eq!(final_state(id), "CANCELLED"),
        // A job read through files is gone when its trial's end is recorded.
        false => assert_cancelled(id),
    }
    remove_node_outputs(name);
}

/// Waits until `ready` holds, for at most a minute.
fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(Instant::now() < deadline, "waited a minute for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The recorded handles of the study's running attempts.
fn running_jobs(scratch: &Scratch, name: &str) -> Vec<u64> {
    scratch
        .try_query(&format!(
            "SELECT t.worker FROM trials t JOIN studies s ON s.id = t.study_id
             WHERE s.name = '{name}' AND t.state = 'running' AND t.worker IS NOT NULL"
        ))
        .unwrap_or_default()
        .iter()
        .filter_map(|row| row[0].as_str()?.strip_prefix("slurm:")?.parse().ok())
        .collect()
}

#[test]
fn a_controller_killed_mid_study_adopts_its_jobs_and_submits_none_twice() {
    let _cluster = common::slurm_shared();
    if let Some(counted) = Counted::new("adopted", 6, 3, "3") {
        killed_mid_study_then_run_again(&counted, "adopted");
    }
}

#[test]
fn a_controller_killed_mid_study_adopts_its_jobs_that_report_through_the_database() {
    let _cluster = common::slurm_shared();
    let (Some(_), Some(url)) = (test_slurm(), common::test_postgres()) else {
        return;
    };
    let name = common::unique_name("adopted-db");
    let scratch = Scratch::on_postgres(&url);
    let counted = Counted::in_scratch(scratch, &name, 6, 3, "3", ", report: database");
    killed_mid_study_then_run_again(&counted, &name);
}

/// SIGKILLs the controller of the study `name` once three of its jobs run, then runs it
/// again: the study completes with one job per attempt, each worker started once.
fn killed_mid_study_then_run_again(counted: &Counted, name: &str) {
    let scratch = &counted.scratch;
    let mut first = counted.start();
    wait_until("three running jobs", || {
        running_jobs(scratch, name).len() == 3
    });
    let adopted = running_jobs(scratch, name);
    kill(Pid::from_raw(first.id() as i32), Signal::SIGKILL).unwrap();
    first.wait().unwrap();
    // The jobs outlive their controller.
    assert!(adopted.iter().any(|id| in_queue(*id)), "{adopted:?}");

    let out = counted.finish();
    let trials = scratch.trials(name);
    assert_eq!(trials.len(), 6);
    let attempts: u64 = trials.iter().map(|t| t["attempt"].as_u64().unwrap()).sum();
    assert!(
        trials.iter().all(|t| t["state"] == "succeeded"),
        "{trials:?}"
    );
    // One job per attempt, and each worker started once: the killed controller's jobs were
    // adopted, not submitted again.
    assert_eq!(
        lines(&counted.submissions).len() as u64,
        attempts,
        "{}",
        stderr(&out)
    );
    let started = lines(&counted.starts);
    let distinct: HashSet<&String> = started.iter().collect();
    assert_eq!((started.len(), distinct.len()), (6, 6), "{started:?}");
    let recorded: HashSet<u64> = trials.iter().map(job_id).collect();
    assert!(
        adopted.iter().all(|id| recorded.contains(id)),
        "{adopted:?} {recorded:?}"
    );
    remove_node_outputs(name);
}

#[test]
fn an_interrupted_study_cancels_its_jobs() {
    let _cluster = common::slurm_shared();
    let Some(counted) = Counted::new("interrupted", 4, 2, "600") else {
        return;
    };
    let mut run = counted.start();
    wait_until("two running jobs", || {
        running_jobs(&counted.scratch, "interrupted").len() == 2
    });
    let jobs = running_jobs(&counted.scratch, "interrupted");
    // What Ctrl-C in a terminal sends to the controller.
    kill(Pid::from_raw(run.id() as i32), Signal::SIGINT).unwrap();
    assert_eq!(run.wait().unwrap().code(), Some(130));
    for id in jobs {
        assert_cancelled(id);
    }
}

#[test]
fn a_job_whose_id_a_killed_controller_never_recorded_is_found_and_adopted() {
    let _cluster = common::slurm_shared();
    if let Some(counted) = Counted::new("unrecorded", 1, 1, "2") {
        unrecorded_then_found(&counted, "unrecorded");
    }
}

#[test]
fn a_job_whose_id_was_never_recorded_is_found_from_a_folder_with_spaces() {
    let _cluster = common::slurm_shared();
    if test_slurm().is_some() {
        let scratch = Scratch::named("hptune test ");
        let counted = Counted::in_scratch(scratch, "unrecorded-spaced", 1, 1, "2", "");
        unrecorded_then_found(&counted, "unrecorded-spaced");
    }
}

/// SIGKILLs the controller of the one-trial study `name` once `sbatch` has submitted its job,
/// before the job's id is recorded; then runs the study again: the job is found, by its name
/// and its script, and adopted, not submitted again.
fn unrecorded_then_found(counted: &Counted, name: &str) {
    let scratch = &counted.scratch;
    std::fs::write(scratch.path("kill-controller"), "").unwrap();
    let first = counted.start().wait().unwrap();
    assert_eq!(first.signal(), Some(9), "the controller was not killed");
    assert_eq!(lines(&counted.submissions).len(), 1);
    let unrecorded = scratch.query("SELECT state, worker FROM trials");
    assert_eq!(unrecorded, [[Value::from("running"), Value::Null]]);

    let out = counted.finish();
    let trial = &scratch.trials(name)[0];
    assert_eq!(trial["state"], "succeeded", "{trial}");
    assert_eq!(trial["attempt"], 1, "{trial}");
    // Found by its name and script: submitted once, its worker started once.
    assert_eq!(lines(&counted.submissions).len(), 1, "{}", stderr(&out));
    assert_eq!(lines(&counted.starts).len(), 1);
    let job = slurm_job(job_id(trial));
    assert_eq!(job["JobName"], format!("hptune-{name}-0-1"));
}

#[test]
fn a_recorded_job_id_slurm_gave_to_another_job_is_neither_followed_nor_cancelled() {
    let _cluster = common::slurm_shared();
    let Some(counted) = Counted::new("reused", 1, 1, "1") else {
        return;
    };
    let scratch = &counted.scratch;
    // The controller dies with its job running; the job ends, Slurm forgets it and gives its
    // id to someone else's job (here: the recorded id is made that of another job).
    let mut first = counted.start();
    wait_until("a running job", || {
        !running_jobs(scratch, "reused").is_empty()
    });
    kill(Pid::from_raw(first.id() as i32), Signal::SIGKILL).unwrap();
    first.wait().unwrap();
    let own = running_jobs(scratch, "reused")[0];
    Command::new("scancel")
        .arg(own.to_string())
        .status()
        .unwrap();
    let other = Command::new("sbatch")
        .args([
            "--parsable",
            "--job-name=someone-elses",
            "--output=/dev/null",
            "--wrap=sleep 300",
        ])
        .output()
        .unwrap();
    assert!(other.status.success(), "{}", stderr(&other));
    let other: u64 = String::from_utf8_lossy(&other.stdout)
        .trim()
        .parse()
        .unwrap();
    scratch.execute(&format!("UPDATE trials SET worker = 'slurm:{other}'"));

    let text = std::fs::read_to_string(&counted.path).unwrap();
    std::fs::write(
        &counted.path,
        text.replace("  env:", "  timeout: 30s\n  env:"),
    )
    .unwrap();
    let out = counted.run().output().unwrap();
    let still_there = in_queue(other);
    Command::new("scancel")
        .arg(other.to_string())
        .status()
        .unwrap();
    assert!(still_there, "hptune cancelled someone else's job {other}");
    assert_success(&out);
    // The attempt, whose job nobody watched to its end, ran again as a new one.
    let trial = &scratch.trials("reused")[0];
    assert_eq!(trial["state"], "succeeded", "{trial}");
    assert_eq!(trial["attempt"], 2, "{trial}");
    assert!(![own, other].contains(&job_id(trial)), "{trial}");
}

#[test]
fn a_worker_whose_path_holds_an_equals_sign_runs() {
    let _cluster = common::slurm_shared();
    if test_slurm().is_none() {
        return;
    }
    let scratch = Scratch::new();
    let folder = scratch.path("lr=0.1");
    std::fs::create_dir(&folder).unwrap();
    let worker = folder.join("worker");
    std::fs::copy(common::worker(), &worker).unwrap();
    let text = study("equals", 1, 1, "{}", "").replace("{worker}", worker.to_str().unwrap());
    let path = scratch.study("study.yaml", &text);
    assert_success(&scratch.hptune(&["run", path.to_str().unwrap()]));
    let trial = &scratch.trials("equals")[0];
    assert_eq!(trial["state"], "succeeded", "{trial}");
    assert!((trial["value"].as_f64().unwrap() - expected_loss(trial)).abs() < 1e-9);
}

#[test]
fn a_log_folder_whose_name_holds_a_percent_sign_gets_the_jobs_output() {
    let _cluster = common::slurm_shared();
    if test_slurm().is_none() {
        return;
    }
    let scratch = Scratch::named("hptune 100%j ");
    let path = scratch.study("study.yaml", &study("percent", 1, 1, "{}", ""));
    assert_success(&scratch.hptune(&["run", path.to_str().unwrap()]));
    let trial = &scratch.trials("percent")[0];
    assert_eq!(trial["state"], "succeeded", "{trial}");
    assert!((trial["value"].as_f64().unwrap() - expected_loss(trial)).abs() < 1e-9);
    let log = std::fs::read_to_string(scratch.path(trial["log_path"].as_str().unwrap()));
    assert!(log.unwrap().contains("loss="), "{trial}");
}

#[test]
fn abbreviations_of_the_options_hptune_sets_are_refused_in_extra_args() {
    let _cluster = common::slurm_shared();
    let scratch = Scratch::new();
    for (arg, expected) in [
        (
            "--arr=0-2",
            "trial.executor.extra_args[1]: '--arr=0-2' is sbatch's --array",
        ),
        (
            "--out=x.log",
            "trial.executor.extra_args[1]: '--out=x.log' is sbatch's --output",
        ),
        (
            "-Hox.log",
            "trial.executor.extra_args[1]: '-Hox.log' is sbatch's --output",
        ),
    ] {
        let text = study(
            "abbreviated",
            2,
            1,
            "{}",
            &format!(", extra_args: [--exclusive, '{arg}']"),
        );
        let path = scratch.study("study.yaml", &text);
        assert_exit_says(
            &scratch.hptune(&["run", path.to_str().unwrap()]),
            2,
            expected,
        );
        assert!(!scratch.path("hptune.db").exists(), "{arg}");
    }
}

#[test]
fn a_job_requeued_by_slurm_is_retried_as_a_new_attempt() {
    let _cluster = common::slurm_shared();
    if let Some(counted) = Counted::new("requeued", 1, 1, "3") {
        requeued_then_retried(&counted, "requeued");
    }
}

#[test]
fn a_requeued_job_that_reports_through_the_database_is_retried_as_a_new_attempt() {
    let _cluster = common::slurm_shared();
    let (Some(_), Some(url)) = (test_slurm(), common::test_postgres()) else {
        return;
    };
    let name = common::unique_name("requeued-db");
    let scratch = Scratch::on_postgres(&url);
    let counted = Counted::in_scratch(scratch, &name, 1, 1, "3", ", report: database");
    requeued_then_retried(&counted, &name);
}

/// Requeues the running job of the one trial of the study `name` with `scontrol requeue`:
/// the trial runs again as a second attempt with a job of its own, the first cancelled.
fn requeued_then_retried(counted: &Counted, name: &str) {
    let scratch = &counted.scratch;
    let mut run = counted.start();
    wait_until("a running job", || {
        running_jobs(scratch, name)
            .first()
            .is_some_and(|id| slurm_job(*id)["JobState"] == "RUNNING")
    });
    let first = running_jobs(scratch, name)[0];
    let requeue = Command::new("scontrol")
        .args(["requeue", &first.to_string()])
        .status()
        .unwrap();
    assert!(requeue.success());
    assert!(run.wait().unwrap().success());
    let trial = &scratch.trials(name)[0];
    assert_eq!(trial["state"], "succeeded", "{trial}");
    assert_eq!(trial["attempt"], 2, "{trial}");
    assert_ne!(job_id(trial), first);
    assert_eq!(lines(&counted.submissions).len(), 2);
    // The requeued job was cancelled, not left to run again over the first attempt.
    assert!(!in_queue(first), "job {first} runs again");
    remove_node_outputs(name);
}

#[test]
fn one_trial_by_hand_runs_as_a_slurm_job() {
    let _cluster = common::slurm_shared();
    if test_slurm().is_none() {
        return;
    }
    let scratch = Scratch::new();
    let path = scratch.study("study.yaml", &study("by-hand", 5, 1, "{}", ""));
    let out = scratch.hptune(&[
        "trial",
        path.to_str().unwrap(),
        "--param",
        "x=0.5",
        "--param",
        "y=1",
        "--executor",
        "slurm",
    ]);
    assert_success(&out);
    let trial = &scratch.trials("by-hand")[0];
    assert_eq!(trial["value"], 1.25);
    assert_eq!(final_state(job_id(trial)), "COMPLETED");
}

#[test]
fn an_unknown_partition_is_refused_before_anything_runs() {
    let _cluster = common::slurm_shared();
    let text = study("nowhere", 2, 1, "{}", ", partition: no-such-partition");
    let Some((scratch, out)) = run_on_slurm(&text) else {
        return;
    };
    assert_exit_says(
        &out,
        2,
        "trial.executor.partition: 'no-such-partition' is not a partition of this Slurm cluster",
    );
    assert_no_study(&scratch, "nowhere");
}

#[test]
fn a_job_sbatch_refuses_fails_its_trial_with_sbatchs_reason() {
    let _cluster = common::slurm_shared();
    // More GPUs than any node has.
    let Some((scratch, out)) = run_on_slurm(&study("greedy", 2, 1, "{}", ", gpus: 64")) else {
        return;
    };
    assert_exit_says(&out, 1, "sbatch refused the job");
    let trials = scratch.trials("greedy");
    assert_eq!(trials.len(), 1, "{trials:?}");
    assert_eq!(trials[0]["state"], "failed");
    let error = trials[0]["error"].as_str().unwrap();
    assert!(
        error.contains("Requested node configuration is not available"),
        "{error}"
    );
}

#[test]
fn without_sbatch_on_path_the_study_is_refused_before_anything_runs() {
    let _cluster = common::slurm_shared();
    let scratch = Scratch::new();
    let path = scratch.study("study.yaml", &study("no-sbatch", 2, 1, "{}", ""));
    let out = scratch
        .command(&["run", path.to_str().unwrap()])
        .env("PATH", scratch.path("empty"))
        .output()
        .unwrap();
    assert_exit_says(&out, 2, "'sbatch' is not a program on PATH");
    assert_no_study(&scratch, "no-sbatch");
}

#[test]
fn a_slurm_study_runs_here_with_executor_local() {
    let _cluster = common::slurm_shared();
    let scratch = Scratch::new();
    let path = scratch.study("study.yaml", &study("here", 2, 1, "{}", ""));
    // The study's Slurm block is set aside: its workers are local processes.
    assert_success(&scratch.hptune(&["run", path.to_str().unwrap(), "--executor", "local"]));
    let trials = scratch.trials("here");
    assert_eq!(trials.len(), 2);
    for trial in &trials {
        assert_eq!(trial["state"], "succeeded", "{trial}");
        assert!(
            trial["worker"].as_str().unwrap().starts_with("pid:"),
            "{trial}"
        );
    }
}

/// `Scratch::command` for `hptune ARGS`, with `hptune` itself on the PATH that the Slurm jobs
/// get: the program a job that reports through the database runs.
fn with_hptune_on_path(scratch: &Scratch, args: &[&str]) -> Command {
    let bin = Path::new(env!("CARGO_BIN_EXE_hptune")).parent().unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let mut command = scratch.command(args);
    command.env("PATH", path);
    command
}

/// Removes the outputs that the jobs of the study `name` that reported through the database
/// left in the node's /tmp (`/tmp/hptune-NAME-TRIAL-ATTEMPT-JOBID.out`).
fn remove_node_outputs(name: &str) {
    let prefix = format!("hptune-{name}-");
    for entry in std::fs::read_dir("/tmp").unwrap().flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        if file.starts_with(&prefix) && file.ends_with(".out") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The files under `dir`, at any depth.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .flat_map(|entry| match entry.path() {
            path if path.is_dir() => files_under(&path),
            path => vec![path],
        })
        .collect()
}

#[test]
fn jobs_that_report_through_the_database_need_no_shared_log_folder() {
    let _cluster = common::slurm_shared();
    let (Some(partition), Some(url)) = (test_slurm(), common::test_postgres()) else {
        return;
    };
    let scratch = Scratch::on_postgres(&url);
    let name = common::unique_name("slurm-db");
    // Each worker notes the metrics file it was given, then writes its measurements there
    // (cloudml-hypertune's file), not to its stdout.
    let seen = scratch.path("seen");
    let wrapper = noting_worker(
        &scratch,
        "$HPTUNE_TRIAL_ID $HPTUNE_METRICS_FILE $CLOUD_ML_HP_METRIC_FILE $HPTUNE_OUTPUT_DIR",
        &seen,
    );
    let text = study(
        &name,
        4,
        2,
        "{MODE: file, SLEEP: '1'}",
        &format!(", partition: {partition}, report: database"),
    )
    .replace("{worker}", wrapper.to_str().unwrap());
    let path = scratch.study("study.yaml", &text);
    let out = with_hptune_on_path(&scratch, &["run", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_success(&out);

    let trials = scratch.trials(&name);
    assert_eq!(trials.len(), 4);
    for trial in &trials {
        assert_eq!(trial["state"], "succeeded", "{trial}");
        assert!((trial["value"].as_f64().unwrap() - expected_loss(trial)).abs() < 1e-9);
        let id = job_id(trial);
        assert_eq!(final_state(id), "COMPLETED");
        // The job's output is in the node's /tmp, not the attempt's log, which only says
        // where the job is.
        let job = slurm_job(id);
        let output = PathBuf::from(format!("/tmp/{}-{id}.out", job["JobName"]));
        assert_eq!(Path::new(&job["StdOut"]), output);
        assert!(output.exists(), "{}", output.display());
        std::fs::remove_file(output).unwrap();
        let log = std::fs::read_to_string(scratch.path(trial["log_path"].as_str().unwrap()));
        assert!(log.unwrap().contains(&format!("slurm:{id}")), "{trial}");
    }
    // The workers' metrics files were the relay's, in a folder of the job's own on its node
    // (removed at its end), never in the study's log folder, which holds no metrics file
    // and no exit status: the controller read nothing there.
    let seen = lines(&seen);
    assert_eq!(seen.len(), 4, "{seen:?}");
    for line in &seen {
        let words: Vec<&str> = line.split(' ').collect();
        let metrics = Path::new(words[1]);
        assert!(
            metrics.starts_with(std::env::temp_dir()) && !metrics.starts_with(scratch.dir.path()),
            "{line}"
        );
        assert!(
            metrics
                .parent()
                .unwrap()
                .to_string_lossy()
                .contains("hptune-job-"),
            "{line}"
        );
        assert_eq!(words[1], words[2], "{line}");
        assert!(!metrics.exists(), "{line}");
        // The model folder goes to the job as an absolute path (the node may lack the
        // controller's working directory), the one recorded with the attempt.
        let trial = trials
            .iter()
            .find(|t| t["number"].as_u64() == words[0].parse().ok())
            .unwrap_or_else(|| panic!("no trial of {line}"));
        assert!(Path::new(words[3]).is_absolute(), "{line}");
        assert_eq!(trial["artifact_dir"], words[3], "{line}");
    }
    let logs = scratch.path("hptune-logs");
    let written: Vec<PathBuf> = files_under(&logs)
        .into_iter()
        .filter(|f| f.extension().is_none_or(|e| e != "log" && e != "sbatch"))
        .collect();
    assert!(written.is_empty(), "{written:?}");
}

#[test]
fn a_failing_job_that_reports_through_the_database_is_recorded_with_its_error() {
    let _cluster = common::slurm_shared();
    let (Some(_), Some(url)) = (test_slurm(), common::test_postgres()) else {
        return;
    };
    let scratch = Scratch::on_postgres(&url);
    let name = common::unique_name("slurm-db-fail");
    let text = study(&name, 1, 1, "{MODE: fail}", ", report: database");
    let path = scratch.study("study.yaml", &text);
    let out = with_hptune_on_path(&scratch, &["run", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_failed_with_the_workers_error(&scratch, &out, &name);
}

#[test]
fn reporting_through_the_database_is_refused_without_one() {
    let _cluster = common::slurm_shared();
    let scratch = Scratch::new();
    for (report, expected) in [
        (
            "database",
            "trial.executor.report: database needs a PostgreSQL storage",
        ),
        (
            "email",
            "trial.executor.report: 'email' is not a way to report: use files or database",
        ),
    ] {
        let text = study("refused", 2, 1, "{}", &format!(", report: {report}"));
        let path = scratch.study("study.yaml", &text);
        assert_exit_says(
            &scratch.hptune(&["run", path.to_str().unwrap()]),
            2,
            expected,
        );
        // Refused before the database is even created.
        assert!(!scratch.path("hptune.db").exists(), "{report}");
    }
}

/// Whether the cluster holds jobs to their memory (`scripts/start-slurm.sh` sets
/// `TaskPlugin=task/cgroup` where the machine's memory cgroup is writable); where it does not,
/// the test is skipped, unless `HPTUNE_TEST_SLURM=required`.
fn memory_is_enforced() -> bool {
    let out = Command::new("scontrol")
        .args(["show", "config"])
        .output()
        .unwrap();
    let enforced = String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.starts_with("TaskPlugin ") && l.contains("task/cgroup"));
    if !enforced {
        let why = "the Slurm cluster does not enforce memory limits (TaskPlugin=task/cgroup)";
        if std::env::var("HPTUNE_TEST_SLURM").as_deref() == Ok("required") {
            panic!("HPTUNE_TEST_SLURM=required, but {why}");
        }
        eprintln!("skipped: {why}");
    }
    enforced
}

/// Runs a study of one trial whose worker fills 400 MB in a job of 50 MB, its jobs reporting
/// `report`, in `scratch`; checks that the trial failed for its memory, not retried, and that
/// Slurm ended its job OUT_OF_MEMORY.
fn assert_out_of_memory_fails_the_trial(scratch: &Scratch, report: &str) {
    let name = common::unique_name("oom");
    let text = format!(
        r#"
name: {name}
objective: {{metric: loss, goal: minimize}}
parameters:
  - {{id: x, type: double, min: 0.0, max: 1.0}}
algorithm: random
max_trial_count: 1
max_failed_trial_count: 1
trial:
  command: [python3, -c, "import time; x = b'x' * (400 * 2**20); time.sleep(2); print('loss=1')"]
  executor: {{kind: slurm, poll_interval: 200ms, mem: 50M, report: {report}}}
"#
    );
    let path = scratch.study("study.yaml", &text);
    let out = with_hptune_on_path(scratch, &["run", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_exit_says(&out, 1, "1 trials failed");
    let trial = &scratch.trials(&name)[0];
    assert_eq!(trial["state"], "failed", "{trial}");
    assert_eq!(trial["attempt"], 1, "retried: {trial}");
    let error = trial["error"].as_str().unwrap();
    assert!(
        error.contains("it ran out of memory (trial.executor.mem)"),
        "{error}"
    );
    assert_eq!(final_state(job_id(trial)), "OUT_OF_MEMORY");
    remove_node_outputs(&name);
}

#[test]
fn a_job_over_its_memory_fails_its_trial_out_of_memory() {
    let _cluster = common::slurm_shared();
    if test_slurm().is_none() || !memory_is_enforced() {
        return;
    }
    assert_out_of_memory_fails_the_trial(&Scratch::new(), "files");
}

#[test]
fn a_job_over_its_memory_that_reports_through_the_database_fails_out_of_memory() {
    let _cluster = common::slurm_shared();
    let (Some(_), Some(url)) = (test_slurm(), common::test_postgres()) else {
        return;
    };
    if memory_is_enforced() {
        assert_out_of_memory_fails_the_trial(&Scratch::on_postgres(&url), "database");
    }
}

/// Runs a study of one trial whose first job a more urgent job preempts, its jobs reporting
/// `report`, in `scratch`; checks that the trial ran again as a new attempt (a new job) and
/// succeeded, the first attempt recorded as retried for the preemption.
fn assert_preempted_job_is_retried(scratch: &Scratch, partition: &str, report: &str) {
    let name = common::unique_name("preempted");
    // The trial's job holds the node's four GPUs in the partition whose jobs may be
    // preempted; a job of the urgent partition that asks for them cancels it (PREEMPTED).
    let text = study(
        &name,
        1,
        1,
        "{SLEEP: '4'}",
        &format!(", partition: {partition}-preemptible, gpus: 4, report: {report}"),
    );
    let path = scratch.study("study.yaml", &text);
    let mut run = with_hptune_on_path(scratch, &["run", path.to_str().unwrap()])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("a running job", || {
        running_jobs(scratch, &name)
            .first()
            .is_some_and(|id| slurm_job(*id)["JobState"] == "RUNNING")
    });
    let first = running_jobs(scratch, &name)[0];
    let urgent = Command::new("sbatch")
        .args([
            "--parsable",
            &format!("--partition={partition}-urgent"),
            "--gres=gpu:4",
            "--output=/dev/null",
            "--wrap=sleep 1",
        ])
        .output()
        .unwrap();
    assert!(urgent.status.success(), "{}", stderr(&urgent));
    assert!(run.wait().unwrap().success());
    assert_eq!(final_state(first), "PREEMPTED");
    let trial = &scratch.trials(&name)[0];
    assert_eq!(trial["state"], "succeeded", "{trial}");
    assert_eq!(trial["attempt"], 2, "{trial}");
    assert_ne!(job_id(trial), first);
    let attempts = scratch.query(&format!(
        "SELECT a.attempt, a.outcome, a.error FROM attempts a JOIN trials t ON t.id = a.trial_id
         JOIN studies s ON s.id = t.study_id WHERE s.name = '{name}' ORDER BY a.attempt"
    ));
    assert_eq!(attempts[0][1], "retried", "{attempts:?}");
    assert!(
        attempts[0][2]
            .as_str()
            .unwrap()
            .contains("Slurm preempted it"),
        "{attempts:?}"
    );
    assert_eq!(attempts[1][1], "succeeded", "{attempts:?}");
    remove_node_outputs(&name);
}

#[test]
fn a_job_preempted_by_a_more_urgent_one_is_retried_as_a_new_attempt() {
    let _cluster = common::slurm_shared();
    if let Some(partition) = test_slurm() {
        assert_preempted_job_is_retried(&Scratch::new(), &partition, "files");
    }
}

#[test]
fn a_preempted_job_that_reports_through_the_database_is_retried_as_a_new_attempt() {
    let _cluster = common::slurm_shared();
    if let (Some(partition), Some(url)) = (test_slurm(), common::test_postgres()) {
        assert_preempted_job_is_retried(&Scratch::on_postgres(&url), &partition, "database");
    }
}
