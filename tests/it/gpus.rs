//! GPUs for local trials (`trial.resources.gpus`) on a machine without any: a fake
//! `nvidia-smi` first on PATH lists the devices, or `--gpus` / `HPTUNE_GPUS` names them. Each
//! worker holds its devices as folders while it runs (`fixtures/workers/gpus.sh`), so a device
//! handed to two running workers is seen by the second, whatever the timing; and it logs what
//! it was given, and how many devices all workers held as it started.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{Scratch, assert_exit_says, assert_success, stderr};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const STUDY: &str = r#"
name: {name}
objective: {metric: loss, goal: minimize}
parameters:
  - {id: x, type: double, min: 0.0, max: 1.0}
algorithm: random
max_trial_count: {trials}
parallel_trial_count: {parallel}
trial:
  command: [{gpu_worker}]
  env: {IN_USE: '{in_use}', GPU_LOG: '{log}', SLEEP: '{sleep}'{env}}
  resources: {resources}
"#;

/// A study of a [`Machine`]: its trials, and what each asks.
pub(crate) struct Trials<'a> {
    pub(crate) name: &'a str,
    pub(crate) count: u64,
    pub(crate) parallel: u64,
    /// `trial.resources`, as the study file writes it.
    pub(crate) resources: &'a str,
    /// How long each worker holds its devices, in seconds.
    pub(crate) sleep: f64,
}

impl<'a> Trials<'a> {
    /// `count` trials of study `name`, `parallel` at once, each asking for `resources` and
    /// holding them `sleep` seconds.
    pub(crate) fn new(
        name: &'a str,
        count: u64,
        parallel: u64,
        resources: &'a str,
        sleep: f64,
    ) -> Self {
        Self {
            name,
            count,
            parallel,
            resources,
            sleep,
        }
    }
}

/// The UUID the fake `nvidia-smi` gives GPU `index`.
fn uuid(index: usize) -> String {
    format!("GPU-00000000-1111-2222-3333-00000000000{index}")
}

/// The memory the fake `nvidia-smi` gives each GPU, in MiB (an H100's).
pub(crate) const DEVICE_MIB: u64 = 81559;

/// A scratch directory standing for a machine: a fake `nvidia-smi` listing `gpus` devices
/// and their memory (or failing as it does without a driver, when `gpus` is `None`), a lock
/// folder of its own, and the files the workers write.
pub(crate) struct Machine {
    pub(crate) scratch: Scratch,
    bin: PathBuf,
    /// The devices named to `hptune` by `HPTUNE_GPUS`, if any.
    given: Option<&'static str>,
}

/// What one worker saw as it started.
#[derive(Debug, Clone)]
struct Start {
    study: String,
    trial: u64,
    attempt: u32,
    cuda_visible_devices: String,
    hptune_gpus: String,
    /// Devices held by all workers as it started, its own included.
    in_use: usize,
}

impl Machine {
    pub(crate) fn new(gpus: Option<usize>) -> Self {
        Self::on(Scratch::new(), gpus)
    }

    /// The machine of `scratch` (and its database).
    pub(crate) fn on(scratch: Scratch, gpus: Option<usize>) -> Self {
        let bin = scratch.path("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(scratch.path("in-use")).unwrap();
        let (listing, memory) = match gpus {
            Some(n) => (
                (0..n)
                    .map(|i| {
                        format!(
                            "echo 'GPU {i}: NVIDIA H100 80GB HBM3 (UUID: {})'\n",
                            uuid(i)
                        )
                    })
                    .collect::<String>(),
                (0..n)
                    .map(|i| format!("echo '{i}, {}, {DEVICE_MIB}'\n", uuid(i)))
                    .collect::<String>(),
            ),
            None => {
                let failed = "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'\nexit 9\n";
                (failed.to_string(), failed.to_string())
            }
        };
        let calls = scratch.path("nvidia-smi-calls");
        let machine = Self {
            scratch,
            bin,
            given: None,
        };
        machine.program(
            "nvidia-smi",
            &format!(
                "echo \"$*\" >> '{}'\ncase \"$*\" in\n*--query-gpu*)\n{memory};;\n*)\n{listing};;\nesac\n",
                calls.display()
            ),
        );
        machine
    }

    /// The machine, its devices named to `hptune` by `HPTUNE_GPUS` (`0,1`).
    pub(crate) fn giving(self, list: &'static str) -> Self {
        Self {
            given: Some(list),
            ..self
        }
    }

    /// Puts a shell script named `name` first on this machine's PATH.
    pub(crate) fn program(&self, name: &str, body: &str) {
        let path = self.bin.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }

    /// The lines of the log file `name`, split at spaces, each of `fields` fields.
    pub(crate) fn log(&self, name: &str, fields: usize) -> Vec<Vec<String>> {
        let log = std::fs::read_to_string(self.path(name)).unwrap_or_default();
        log.lines()
            .map(|line| {
                let f: Vec<String> = line.split(' ').map(str::to_string).collect();
                assert_eq!(f.len(), fields, "{line}");
                f
            })
            .collect()
    }

    /// A study of `trials` trials of `gpus` devices each, `parallel` at once, each worker
    /// holding its devices for `sleep` seconds.
    fn study(&self, name: &str, trials: u64, parallel: u64, gpus: &str, sleep: f64) -> PathBuf {
        let resources = format!("{{gpus: {gpus}}}");
        let trials = Trials::new(name, trials, parallel, &resources, sleep);
        let conflicts = format!(", CONFLICTS: '{}'", self.path("conflicts").display());
        self.study_of(&trials, "gpus.sh", &conflicts)
    }

    /// The study file of `trials`, run by `worker` (of `tests/fixtures/workers`) with the
    /// variables IN_USE (the folder `in-use`), GPU_LOG (the file `gpu-log`), SLEEP, then
    /// `env` (`, NAME: 'value'`).
    pub(crate) fn study_of(&self, trials: &Trials, worker: &str, env: &str) -> PathBuf {
        let worker = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/workers")
            .join(worker);
        let text = STUDY
            .replace("{name}", trials.name)
            .replace("{trials}", &trials.count.to_string())
            .replace("{parallel}", &trials.parallel.to_string())
            .replace("{gpu_worker}", worker.to_str().unwrap())
            .replace("{in_use}", self.path("in-use").to_str().unwrap())
            .replace("{log}", self.path("gpu-log").to_str().unwrap())
            .replace("{sleep}", &trials.sleep.to_string())
            .replace("{env}", env)
            .replace("{resources}", trials.resources);
        self.scratch.study(&format!("{}.yaml", trials.name), &text)
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.scratch.path(name)
    }

    /// `hptune ARGS` on this machine: its fake programs first on PATH, the machine's lock
    /// folder, and none of the test runner's own device variables (`HPTUNE_GPUS` only when the
    /// machine gives it).
    fn command(&self, args: &[&str]) -> Command {
        let mut command = self.scratch.command(args);
        let path = std::env::var("PATH").unwrap_or_default();
        command
            .env("PATH", format!("{}:{path}", self.bin.display()))
            .env("HPTUNE_GPU_LOCKS", self.path("locks"))
            .env_remove("CUDA_VISIBLE_DEVICES")
            .env_remove("HPTUNE_GPUS");
        if let Some(list) = self.given {
            command.env("HPTUNE_GPUS", list);
        }
        command
    }

    pub(crate) fn run(&self, study: &Path, extra: &[&str]) -> Output {
        self.run_with(study, extra, &[])
    }

    /// `hptune run STUDY EXTRA...` with these variables set.
    fn run_with(&self, study: &Path, extra: &[&str], env: &[(&str, &str)]) -> Output {
        let mut args = vec!["run", study.to_str().unwrap()];
        args.extend_from_slice(extra);
        let mut command = self.command(&args);
        command.envs(env.iter().copied());
        command.output().unwrap()
    }

    pub(crate) fn spawn(&self, study: &Path) -> Child {
        self.command(&["run", study.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// What each worker saw as it started, in order.
    fn starts(&self) -> Vec<Start> {
        self.log("gpu-log", 6)
            .into_iter()
            .map(|f| Start {
                study: f[0].clone(),
                trial: f[1].parse().unwrap(),
                attempt: f[2].parse().unwrap(),
                cuda_visible_devices: f[3].clone(),
                hptune_gpus: f[4].clone(),
                in_use: f[5].parse().unwrap(),
            })
            .collect()
    }

    /// Fails the test if two running workers were ever given one device.
    fn assert_no_device_shared(&self) {
        let conflicts = std::fs::read_to_string(self.path("conflicts")).unwrap_or_default();
        assert!(conflicts.is_empty(), "devices shared:\n{conflicts}");
    }

    /// How often the fake `nvidia-smi` ran.
    fn nvidia_smi_calls(&self) -> usize {
        std::fs::read_to_string(self.path("nvidia-smi-calls"))
            .unwrap_or_default()
            .lines()
            .count()
    }

    /// Waits (at most a minute: the test fails otherwise) until `n` workers have started.
    fn wait_for_starts(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.starts().len() < n {
            assert!(
                Instant::now() < deadline,
                "{} workers started",
                self.starts().len()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The devices recorded with each trial of `study`, by number, as `trials --format json`
/// shows them.
fn recorded_gpus(machine: &Machine, study: &str) -> BTreeMap<u64, String> {
    machine
        .scratch
        .trials(study)
        .iter()
        .map(|t| {
            let gpus: Vec<&str> = t["gpus"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| g.as_str().unwrap())
                .collect();
            (t["number"].as_u64().unwrap(), gpus.join(","))
        })
        .collect()
}

#[test]
fn four_gpus_run_at_most_four_trials_at_once_each_on_a_device_of_its_own_on_sqlite() {
    four_gpus_one_a_trial(Scratch::new());
}

#[test]
fn four_gpus_run_at_most_four_trials_at_once_each_on_a_device_of_its_own_on_postgres() {
    if let Some(url) = common::test_postgres() {
        four_gpus_one_a_trial(Scratch::on_postgres(&url));
    }
}

/// 12 trials of one GPU each, 8 at once, on 4 devices.
fn four_gpus_one_a_trial(scratch: Scratch) {
    let machine = Machine::on(scratch, Some(4));
    let name = common::unique_name("four");
    let study = machine.study(&name, 12, 8, "1", 0.5);
    let out = machine.run(&study, &[]);
    assert_success(&out);
    let said = stderr(&out);
    assert!(
        said.contains("GPUs 0,1,2,3 (from nvidia-smi -L), 1 per trial: at most 4 trials at once"),
        "{said}"
    );
    assert!(said.contains("running (limited by 4 GPUs)"), "{said}");
    machine.assert_no_device_shared();

    let starts = machine.starts();
    assert_eq!(starts.len(), 12);
    let most = starts.iter().map(|s| s.in_use).max().unwrap();
    assert!(most <= 4, "{most} devices held at once: {starts:?}");
    // CUDA names each device by its UUID, hptune by its index; every device was used.
    let mut used = BTreeSet::new();
    for start in &starts {
        let index: usize = start.hptune_gpus.parse().expect("one index");
        assert_eq!(start.cuda_visible_devices, uuid(index), "{start:?}");
        used.insert(index);
    }
    assert_eq!(used, (0..4).collect());
    // The devices are recorded with each trial and with its attempt, and shown.
    let recorded = recorded_gpus(&machine, &name);
    for start in &starts {
        assert_eq!(recorded[&start.trial], start.hptune_gpus, "{start:?}");
    }
    let attempts = machine.scratch.query(&format!(
        "SELECT t.number, a.gpus FROM attempts a JOIN trials t ON t.id = a.trial_id
         WHERE t.study_id = (SELECT id FROM studies WHERE name = '{name}') ORDER BY t.number"
    ));
    assert_eq!(attempts.len(), 12);
    for row in &attempts {
        assert_eq!(row[1], recorded[&row[0].as_u64().unwrap()].as_str());
    }
    let table = machine.command(&["trials", &name]).output().unwrap();
    assert_success(&table);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.lines().next().unwrap().ends_with("gpus"), "{table}");
}

#[test]
fn two_gpus_a_trial_on_three_devices_run_one_trial_at_a_time() {
    let machine = Machine::new(None);
    let study = machine.study("pairs", 4, 3, "2", 0.3);
    let out = machine.run(&study, &["--gpus", "0,1,2"]);
    assert_success(&out);
    assert!(
        stderr(&out).contains("running (limited by 3 GPUs)"),
        "{}",
        stderr(&out)
    );
    assert_eq!(machine.nvidia_smi_calls(), 0, "the devices were given");
    machine.assert_no_device_shared();
    let starts = machine.starts();
    assert_eq!(starts.len(), 4);
    for start in &starts {
        let devices: BTreeSet<&str> = start.cuda_visible_devices.split(',').collect();
        assert_eq!(devices.len(), 2, "{start:?}");
        assert_eq!(start.hptune_gpus, start.cuda_visible_devices);
        assert_eq!(start.in_use, 2, "one trial at a time: {start:?}");
    }
}

#[test]
fn two_gpus_a_trial_on_four_devices_run_two_trials_at_once_on_disjoint_pairs() {
    let machine = Machine::new(Some(4));
    let study = machine.study("two-pairs", 6, 6, "2", 1.0);
    let out = machine.run(&study, &[]);
    assert_success(&out);
    assert!(
        stderr(&out).contains("2 per trial: at most 2 trials at once"),
        "{}",
        stderr(&out)
    );
    machine.assert_no_device_shared();
    let starts = machine.starts();
    assert_eq!(starts.len(), 6);
    let mut used = BTreeSet::new();
    for start in &starts {
        let devices: BTreeSet<&str> = start.hptune_gpus.split(',').collect();
        assert_eq!(devices.len(), 2, "{start:?}");
        assert!(start.in_use <= 4, "{start:?}");
        used.extend(devices.iter().map(|d| d.to_string()));
    }
    // Two trials ran at once (a worker started while another held its pair), on all four.
    assert!(starts.iter().any(|s| s.in_use == 4), "{starts:?}");
    assert_eq!(used, ["0", "1", "2", "3"].map(String::from).into());
}

#[test]
fn hptune_gpus_and_cuda_visible_devices_name_the_pool_and_a_study_without_gpus_looks_for_none() {
    let machine = Machine::new(Some(4));
    let study = machine.study("env", 2, 2, "1", 0.1);
    let visible = ("CUDA_VISIBLE_DEVICES", "5,7");
    let out = machine.run_with(&study, &[], &[visible]);
    assert_exit_says(&out, 0, "GPUs 5,7 (from CUDA_VISIBLE_DEVICES)");
    let given = machine.study("given", 2, 2, "1", 0.1);
    let out = machine.run_with(&given, &[], &[visible, ("HPTUNE_GPUS", "3")]);
    assert_exit_says(&out, 0, "GPUs 3 (from --gpus)");
    assert_eq!(machine.nvidia_smi_calls(), 0);
    let seen: BTreeSet<String> = machine
        .starts()
        .iter()
        .map(|s| s.cuda_visible_devices.clone())
        .collect();
    assert_eq!(seen, ["3", "5", "7"].map(String::from).into());

    // Without `resources`, no device is looked for, and the pool's variable is not the
    // worker's.
    let text = std::fs::read_to_string(&study)
        .unwrap()
        .replace("name: env", "name: cpu")
        .replace("  resources: {gpus: 1}\n", "");
    let cpu = machine.scratch.study("cpu.yaml", &text);
    assert_success(&machine.run_with(&cpu, &[], &[("HPTUNE_GPUS", "0,1")]));
    assert_eq!(machine.nvidia_smi_calls(), 0);
    let cpu_starts: Vec<Start> = machine
        .starts()
        .into_iter()
        .filter(|s| s.study == "cpu")
        .collect();
    assert_eq!(cpu_starts.len(), 2);
    assert!(
        cpu_starts.iter().all(|s| s.hptune_gpus == "none"),
        "{cpu_starts:?}"
    );
    assert!(
        recorded_gpus(&machine, "cpu")
            .values()
            .all(String::is_empty)
    );
}

#[test]
fn a_study_asking_for_gpus_that_are_not_there_is_refused_before_any_trial() {
    let machine = Machine::new(None);
    let study = machine.study("none", 2, 2, "1", 0.1);
    let out = machine.run(&study, &[]);
    assert_exit_says(
        &out,
        2,
        "none.yaml: trial.resources.gpus: the study asks for 1 GPU per trial, but nvidia-smi -L failed",
    );
    assert!(stderr(&out).contains("could not communicate with the NVIDIA driver"));
    assert!(stderr(&out).contains("--gpus 0,1,2,3"));
    let hidden = machine.run_with(&study, &[], &[("CUDA_VISIBLE_DEVICES", "")]);
    assert_exit_says(&hidden, 2, "but CUDA_VISIBLE_DEVICES gives none");
    let pairs = machine.study("pairs", 2, 2, "2", 0.1);
    let out = machine.run(&pairs, &["--gpus", "0"]);
    assert_exit_says(&out, 2, "asks for 2 GPUs per trial, but --gpus gives 1 (0)");
    let out = machine.run(&pairs, &["--gpus", "0,,1"]);
    assert_exit_says(&out, 2, "'' is not a device");
    assert!(machine.starts().is_empty());
    assert!(!machine.path("hptune.db").exists(), "nothing was recorded");
}

#[test]
fn a_retried_trial_runs_its_next_attempt_on_devices_of_its_own_recorded_with_it() {
    let machine = Machine::new(Some(2));
    let text = std::fs::read_to_string(machine.study("retried", 3, 2, "1", 0.3))
        .unwrap()
        .replace("SLEEP: '0.3'", "SLEEP: '0.3', KILLED_ONCE: '1'");
    let study = machine.scratch.study("retried.yaml", &text);
    assert_success(&machine.run(&study, &[]));
    machine.assert_no_device_shared();
    let starts = machine.starts();
    assert_eq!(starts.len(), 3, "the second attempts: {starts:?}");
    let attempts = machine.scratch.query(
        "SELECT t.number, a.attempt, a.outcome, a.gpus FROM attempts a JOIN trials t ON t.id = a.trial_id
         ORDER BY t.number, a.attempt",
    );
    assert_eq!(attempts.len(), 6, "{attempts:?}");
    for row in &attempts {
        let outcome = if row[1] == 1 { "retried" } else { "succeeded" };
        assert_eq!(row[2], outcome, "{attempts:?}");
        assert!(
            ["0", "1"].contains(&row[3].as_str().unwrap()),
            "{attempts:?}"
        );
    }
    for start in &starts {
        assert_eq!(start.attempt, 2);
        let row = attempts
            .iter()
            .find(|r| r[0] == start.trial && r[1] == 2)
            .unwrap();
        assert_eq!(row[3], start.hptune_gpus.as_str(), "{start:?}");
    }
}

#[test]
fn a_study_stopped_by_ctrl_c_hands_its_trials_back_without_devices_and_runs_them_on_new_ones() {
    let machine = Machine::new(Some(2));
    let study = machine.study("stopped", 2, 2, "1", 3.0);
    let controller = machine.spawn(&study);
    machine.wait_for_starts(2);
    kill(Pid::from_raw(controller.id() as i32), Signal::SIGINT).unwrap();
    let out = controller.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    let trials = machine.scratch.trials("stopped");
    for trial in &trials {
        assert_eq!(trial["state"], "pending", "{trial}");
        assert_eq!(trial["gpus"], serde_json::json!([]), "{trial}");
    }
    assert_success(&machine.run(&study, &[]));
    machine.assert_no_device_shared();
    let attempts = machine.scratch.query(
        "SELECT a.attempt, a.outcome, a.gpus FROM attempts a ORDER BY a.trial_id, a.attempt",
    );
    assert_eq!(attempts.len(), 4, "{attempts:?}");
    for row in &attempts {
        let outcome = if row[0] == 1 { "retried" } else { "succeeded" };
        assert_eq!(row[1], outcome, "{attempts:?}");
        assert!(
            ["0", "1"].contains(&row[2].as_str().unwrap()),
            "{attempts:?}"
        );
    }
    let recorded = recorded_gpus(&machine, "stopped");
    let starts = machine.starts();
    assert_eq!(starts.len(), 4, "{starts:?}");
    for start in starts.iter().filter(|s| s.attempt == 2) {
        assert_eq!(recorded[&start.trial], start.hptune_gpus, "{start:?}");
    }
}

#[test]
fn two_controllers_on_one_machine_never_hand_out_one_gpu_at_the_same_time() {
    let machine = Machine::new(Some(4));
    let first = machine.study("first", 8, 4, "1", 0.5);
    let second = machine.study("second", 8, 4, "1", 0.5);
    let a = machine.spawn(&first);
    let b = machine.spawn(&second);
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert_success(&a);
    assert_success(&b);
    // Each wants all four devices at first: one of them waited for the other's.
    let said = stderr(&a) + &stderr(&b);
    assert!(said.contains("waiting for GPUs"), "{said}");
    machine.assert_no_device_shared();
    let starts = machine.starts();
    assert_eq!(starts.len(), 16);
    let most = starts.iter().map(|s| s.in_use).max().unwrap();
    assert!(most <= 4, "{most} devices held at once: {starts:?}");
    for study in ["first", "second"] {
        let trials = machine.scratch.trials(study);
        assert!(
            trials.iter().all(|t| t["state"] == "succeeded"),
            "{trials:?}"
        );
    }
}

#[test]
fn a_controller_killed_while_its_workers_run_leaves_them_their_devices_on_sqlite() {
    killed_while_its_workers_run(Scratch::new());
}

#[test]
fn a_controller_killed_while_its_workers_run_leaves_them_their_devices_on_postgres() {
    if let Some(url) = common::test_postgres() {
        killed_while_its_workers_run(Scratch::on_postgres(&url));
    }
}

fn killed_while_its_workers_run(scratch: Scratch) {
    let machine = Machine::on(scratch, Some(4));
    let (name, other_name) = (common::unique_name("crashed"), common::unique_name("other"));
    // Two long trials on devices 0 and 1, two devices free.
    let study = machine.study(&name, 4, 2, "1", 4.0);
    let mut controller = machine.spawn(&study);
    machine.wait_for_starts(2);
    kill(Pid::from_raw(controller.id() as i32), Signal::SIGKILL).unwrap();
    controller.wait().unwrap();

    // While no controller watches them, the workers hold their devices' locks: another
    // study gets only the two free devices.
    let other = machine.study(&other_name, 2, 4, "1", 0.2);
    let out = machine.run(&other, &[]);
    assert_success(&out);
    // The study run again adopts its two workers, which keep their devices, and runs its
    // last two trials on the others.
    let out = machine.run(&study, &[]);
    assert_success(&out);
    machine.assert_no_device_shared();

    let starts = machine.starts();
    let crashed: Vec<&Start> = starts.iter().filter(|s| s.study == name).collect();
    assert_eq!(crashed.len(), 4, "each trial started once: {starts:?}");
    assert!(crashed.iter().all(|s| s.attempt == 1), "{starts:?}");
    let recorded = recorded_gpus(&machine, &name);
    for start in &crashed {
        assert_eq!(recorded[&start.trial], start.hptune_gpus, "{start:?}");
    }
    let trials = machine.scratch.trials(&name);
    assert!(
        trials.iter().all(|t| t["state"] == "succeeded"),
        "{trials:?}"
    );
}

/// A worker that leaves a child running in a session of its own (`setsid`, out of reach of
/// its process group) and ends: the lease ends with the trial, so the next trial on the
/// device starts at once instead of waiting for the child, which holds the lock file too.
#[test]
fn a_child_the_worker_detached_does_not_keep_its_device_after_the_trial() {
    let machine = Machine::new(Some(1));
    // Each worker waits until its child has left its process group (the child writes its
    // pid from its new session), so that the worker's end, which kills its group, spares it.
    let child = machine.path("child");
    let text = format!(
        "name: detached\nobjective: {{metric: loss, goal: minimize}}\nparameters:\n  - {{id: x, type: double, min: 0, max: 1}}\nalgorithm: random\nmax_trial_count: 2\ntrial:\n  command: [sh, -c, 'setsid sh -c \"echo \\$\\$ > {0}-$HPTUNE_TRIAL_ID; exec sleep 30\" > /dev/null 2>&1 & while [ ! -s {0}-$HPTUNE_TRIAL_ID ]; do sleep 0.05; done; echo loss=1']\n  resources: {{gpus: 1}}\n",
        child.display()
    );
    let study = machine.scratch.study("detached.yaml", &text);
    let out = machine.run(&study, &[]);
    let pids: Vec<String> = (0..2)
        .filter_map(|trial| std::fs::read_to_string(format!("{}-{trial}", child.display())).ok())
        .collect();
    for pid in &pids {
        let _ = kill(Pid::from_raw(pid.trim().parse().unwrap()), Signal::SIGKILL);
    }
    assert_success(&out);
    assert_eq!(pids.len(), 2, "each trial left a child: {pids:?}");
    let said = stderr(&out);
    assert!(!said.contains("waiting for GPUs"), "{said}");
    let trials = machine.scratch.trials("detached");
    assert!(
        trials
            .iter()
            .all(|t| t["state"] == "succeeded" && t["gpus"] == serde_json::json!(["0"])),
        "{trials:?}"
    );
}

/// The lock folder removed while a trial runs (by hand, or by a cleaner of old files in
/// `/tmp`): the controller locks its device again on a new file, says so, and a second
/// controller started then waits for the device instead of handing it out.
#[test]
fn a_lock_file_removed_under_a_running_trial_is_locked_again_and_the_device_never_shared() {
    let machine = Machine::new(Some(1));
    let long = machine.study("long", 1, 1, "1", 10.0);
    let first = machine.spawn(&long);
    machine.wait_for_starts(1);
    let locks = machine.path("locks");
    let lock = locks.join(format!("gpu-{}.lock", uuid(0)));
    assert!(lock.is_file(), "{}", lock.display());
    std::fs::remove_dir_all(&locks).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !lock.is_file() {
        assert!(
            Instant::now() < deadline,
            "the controller did not lock its device again"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Locked again while its worker runs (it holds the device as a folder until it ends),
    // not only once the trial has ended and the next is leased.
    assert!(
        machine.path("in-use").join(uuid(0)).is_dir(),
        "the lock file came back only after the trial"
    );
    let short = machine.study("short", 1, 1, "1", 0.2);
    let second = machine.run(&short, &[]);
    let first = first.wait_with_output().unwrap();
    assert_success(&first);
    assert_success(&second);
    let said = stderr(&first);
    assert!(
        said.contains(
            "GPU 0: its lock file was removed or replaced while a trial held it; locked again"
        ),
        "{said}"
    );
    assert!(
        stderr(&second).contains("waiting for GPUs"),
        "{}",
        stderr(&second)
    );
    machine.assert_no_device_shared();
}
