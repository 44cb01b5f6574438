//! Several trials on one GPU (`trial.resources.gpus: 1/K`) on a machine without any (the
//! machine of `gpus.rs`): the devices are named by `HPTUNE_GPUS`, a fake `nvidia-smi` first on
//! PATH says their memory,
//! and a fake `nvidia-cuda-mps-control` stands for MPS where a test wants it. Each worker
//! (`fixtures/workers/shared_gpu.sh`) holds a file in its device's folder while it runs and
//! logs what it was given and how many trials, of which studies, its device and all devices
//! held as it started.

use crate::common;
use crate::gpus::{DEVICE_MIB, Machine, Trials};

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Output};
use std::time::Duration;

use common::{Scratch, assert_exit_says, assert_success, stderr};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rand::{Rng, SeedableRng};

/// A machine of `gpus.rs` with devices 0 and 1, named to `hptune` by `HPTUNE_GPUS`.
struct Host {
    machine: Machine,
}

/// What one worker saw as it started.
#[derive(Debug, Clone)]
struct Start {
    study: String,
    trial: u64,
    cuda_visible_devices: String,
    hptune_gpus: String,
    gpu_memory: String,
    mps_threads: String,
    mps_memory: String,
    on_device: usize,
    on_all: usize,
    studies_on_device: String,
}

impl Host {
    fn new() -> Self {
        Self::on(Scratch::new())
    }

    /// The host of `scratch` (and its database).
    fn on(scratch: Scratch) -> Self {
        Self {
            machine: Machine::on(scratch, Some(2)).giving("0,1"),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.machine.path(name)
    }

    /// Writes the study file of `trials`, whose trial `oom`, if any, runs out of memory.
    fn study(&self, trials: &Trials, oom: Option<u64>) -> PathBuf {
        let oom = oom.map(|n| n.to_string()).unwrap_or_default();
        let env = format!(", OUT_OF_MEMORY: '{oom}'");
        self.machine.study_of(trials, "shared_gpu.sh", &env)
    }

    fn run(&self, study: &Path) -> Output {
        self.machine.run(study, &[])
    }

    /// What each worker saw as it started, in order.
    fn starts(&self) -> Vec<Start> {
        self.machine
            .log("gpu-log", 11)
            .into_iter()
            .map(|f| Start {
                study: f[0].clone(),
                trial: f[1].parse().unwrap(),
                cuda_visible_devices: f[3].clone(),
                hptune_gpus: f[4].clone(),
                gpu_memory: f[5].clone(),
                mps_threads: f[6].clone(),
                mps_memory: f[7].clone(),
                on_device: f[8].parse().unwrap(),
                on_all: f[9].parse().unwrap(),
                studies_on_device: f[10].clone(),
            })
            .collect()
    }

    /// Fails the test unless every lock file of the host is free: no device, share or slot
    /// is held once no trial runs.
    fn assert_no_lock_held(&self) {
        let files: Vec<PathBuf> = std::fs::read_dir(self.path("locks"))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .collect();
        assert!(files.iter().any(|f| f.to_str().unwrap().contains(".slot-")));
        for file in files {
            let lock = File::open(&file).unwrap();
            assert!(lock.try_lock().is_ok(), "{} is still held", file.display());
        }
    }

    /// Fails the test unless every trial of `study` succeeded.
    fn assert_all_succeeded(&self, study: &str, count: usize) {
        let trials = self.machine.scratch.trials(study);
        assert_eq!(trials.len(), count, "{trials:?}");
        assert!(
            trials.iter().all(|t| t["state"] == "succeeded"),
            "{trials:?}"
        );
    }
}

/// The cap on the memory of a trial holding 1/4 of a fake device, in bytes.
fn quarter_cap() -> u64 {
    (DEVICE_MIB << 20) / 4
}

#[test]
fn twenty_four_quarter_gpu_trials_on_two_devices_run_eight_at_once_four_a_device_on_sqlite() {
    twenty_four_quarter_gpu_trials(Host::new());
}

#[test]
fn twenty_four_quarter_gpu_trials_on_two_devices_run_eight_at_once_four_a_device_on_postgres() {
    if let Some(url) = common::test_postgres() {
        twenty_four_quarter_gpu_trials(Host::on(Scratch::on_postgres(&url)));
    }
}

fn twenty_four_quarter_gpu_trials(host: Host) {
    let name = common::unique_name("quarters");
    let trials = Trials::new(&name, 24, 16, "{gpus: 0.25}", 1.5);
    let out = host.run(&host.study(&trials, None));
    assert_success(&out);
    let said = stderr(&out);
    assert!(
        said.contains("GPUs 0,1 (from --gpus), 1/4 per trial: at most 8 trials at once"),
        "{said}"
    );
    assert!(
        said.contains("memory cap per trial: 19.9 GiB (GPU 0), 19.9 GiB (GPU 1)"),
        "{said}"
    );
    assert!(said.contains("isolation: time-sharing (no MPS)"), "{said}");
    let starts = host.starts();
    assert_eq!(starts.len(), 24, "{starts:?}");
    for start in &starts {
        assert!(
            ["0", "1"].contains(&start.hptune_gpus.as_str()),
            "{start:?}"
        );
        assert_eq!(start.cuda_visible_devices, start.hptune_gpus, "{start:?}");
        assert_eq!(start.gpu_memory, quarter_cap().to_string(), "{start:?}");
        assert_eq!(
            (start.mps_threads.as_str(), start.mps_memory.as_str()),
            ("none", "none")
        );
    }
    let most_on_a_device = starts.iter().map(|s| s.on_device).max().unwrap();
    let most_at_once = starts.iter().map(|s| s.on_all).max().unwrap();
    assert_eq!((most_on_a_device, most_at_once), (4, 8), "{starts:?}");
    for trial in host.machine.scratch.trials(&name) {
        let start = starts.iter().find(|s| s.trial == trial["number"]).unwrap();
        assert_eq!(
            trial["gpus"],
            serde_json::json!([start.hptune_gpus]),
            "{trial}"
        );
        assert!(
            trial["gpu_slot"].as_u64().is_some_and(|slot| slot < 4),
            "{trial}"
        );
    }
    let listed = common::stdout(&host.machine.scratch.hptune(&["trials", &name]));
    assert!(listed.contains(" slot 3"), "{listed}");
    host.assert_all_succeeded(&name, 24);
    host.assert_no_lock_held();
}

/// Controllers SIGKILLed at random moments (their workers run on, and the next controller
/// adopts them) beside a second controller sharing the devices: no device ever holds more
/// than 4 quarter trials, and no slot stays held once all have ended.
#[test]
fn sigkilled_controllers_beside_another_never_double_book_or_leak_a_slot() {
    let host = Host::new();
    let (killed, steady) = (common::unique_name("killed"), common::unique_name("steady"));
    let killed_study = host.study(&Trials::new(&killed, 20, 8, "{gpus: 0.25}", 0.7), None);
    let steady_study = host.study(&Trials::new(&steady, 16, 8, "{gpus: 0.25}", 0.5), None);
    let other = host.machine.spawn(&steady_study);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(34);
    for _ in 0..10 {
        let mut controller = host.machine.spawn(&killed_study);
        std::thread::sleep(Duration::from_millis(rng.random_range(50..1200)));
        kill(Pid::from_raw(controller.id() as i32), Signal::SIGKILL).unwrap();
        controller.wait().unwrap();
    }
    assert_success(&host.run(&killed_study));
    assert_success(&other.wait_with_output().unwrap());
    let starts = host.starts();
    let most = starts.iter().map(|s| s.on_device).max().unwrap();
    assert!(most <= 4, "{most} trials on one device: {starts:?}");
    host.assert_all_succeeded(&killed, 20);
    host.assert_all_succeeded(&steady, 16);
    host.assert_no_lock_held();
}

/// Halves, quarters and whole GPUs from three studies at once: a device holds trials of one
/// study's share at a time, never more than its `K`.
#[test]
fn a_device_holds_one_share_at_a_time_and_no_share_beside_a_whole_gpu() {
    let host = Host::new();
    let names = [
        common::unique_name("halves"),
        common::unique_name("fourths"),
        common::unique_name("wholes"),
    ];
    let shapes = [("{gpus: 0.5}", 8), ("{gpus: 0.25}", 16), ("{gpus: 1}", 4)];
    let controllers: Vec<Child> = names
        .iter()
        .zip(shapes)
        .map(|(name, (resources, count))| {
            let trials = Trials::new(name, count, 8, resources, 0.8);
            host.machine.spawn(&host.study(&trials, None))
        })
        .collect();
    for controller in controllers {
        assert_success(&controller.wait_with_output().unwrap());
    }
    let starts = host.starts();
    for start in &starts {
        assert_eq!(start.studies_on_device, start.study, "{start:?}");
        let k = match names.iter().position(|n| *n == start.study).unwrap() {
            0 => 2,
            1 => 4,
            _ => 1,
        };
        assert!(start.on_device <= k, "{start:?}");
    }
    for (name, (_, count)) in names.iter().zip(shapes) {
        host.assert_all_succeeded(name, count as usize);
    }
    host.assert_no_lock_held();
}

#[test]
fn shares_that_are_not_one_kth_of_a_gpu_and_caps_above_the_device_exit_2_naming_the_field() {
    let host = Host::new();
    for (resources, says) in [
        (
            "{gpus: 0.3}",
            "trial.resources.gpus: 0.3 is neither a whole number of GPUs nor 1/K of one",
        ),
        (
            "{gpus: 0}",
            "trial.resources.gpus: must be whole GPUs from 1 to 1024, or 1/K of one GPU for a whole K from 2 to 16",
        ),
        ("{gpus: -0.25}", "trial.resources.gpus: must be whole GPUs"),
        (
            "{gpus: 0.25, gpu_memory: 100GiB}",
            "trial.resources.gpu_memory: 100 GiB is more than GPU 0 has (79.6 GiB)",
        ),
    ] {
        let name = common::unique_name("bad");
        let trials = Trials::new(&name, 1, 1, resources, 0.0);
        let message = assert_exit_says(&host.run(&host.study(&trials, None)), 2, says);
        if !resources.contains("gpu_memory") {
            assert!(
                message.contains(".yaml:12:"),
                "line:col of the value: {message}"
            );
        }
    }
    assert!(host.starts().is_empty(), "no worker ran");
}

/// A fake MPS control daemon: it records each call (`-d`, or the command read from stdin),
/// and answers `get_server_list` only while "running" (after `-d`, until `quit`, or when the
/// test says it runs).
fn fake_mps(host: &Host) -> PathBuf {
    let calls = host.path("mps-calls");
    let running = host.path("mps-running");
    host.machine.program(
        "nvidia-cuda-mps-control",
        &format!(
            "calls='{}'; running='{}'\n\
             if [ \"$1\" = -d ]; then echo -d >> \"$calls\"; touch \"$running\"; exit 0; fi\n\
             read command; echo \"$command\" >> \"$calls\"\n\
             case \"$command\" in\n\
               get_server_list) [ -e \"$running\" ] || exit 1;;\n\
               quit) rm -f \"$running\";;\n\
             esac\n",
            calls.display(),
            running.display()
        ),
    );
    running
}

#[test]
fn with_mps_each_trial_gets_its_cap_and_share_and_a_daemon_hptune_started_is_stopped() {
    let host = Host::new();
    let running = fake_mps(&host);
    let name = common::unique_name("mps");
    let trials = Trials::new(&name, 4, 4, "{gpus: 0.25, gpu_memory: 8GiB}", 0.2);
    let study = host.study(&trials, None);
    let out = host.run(&study);
    assert_success(&out);
    assert!(
        stderr(&out).contains("isolation: NVIDIA MPS (control daemon started by hptune"),
        "{}",
        stderr(&out)
    );
    let calls = || std::fs::read_to_string(host.path("mps-calls")).unwrap();
    assert_eq!(calls(), "get_server_list\n-d\nquit\n");
    assert!(!running.exists(), "stopped at the end");
    for start in host.starts() {
        assert_eq!(start.gpu_memory, (8u64 << 30).to_string(), "{start:?}");
        assert_eq!(start.mps_threads, "25", "{start:?}");
        assert_eq!(start.mps_memory, "0=8192M", "{start:?}");
    }

    // A daemon that runs already is used, and left running.
    File::create(&running).unwrap();
    let again_name = common::unique_name("mps-running");
    let again = Trials {
        name: &again_name,
        ..trials
    };
    let out = host.run(&host.study(&again, None));
    assert_success(&out);
    assert!(
        stderr(&out).contains("isolation: NVIDIA MPS (the running control daemon)"),
        "{}",
        stderr(&out)
    );
    assert_eq!(calls(), "get_server_list\n-d\nquit\nget_server_list\n");
    assert!(running.exists());
}

#[test]
fn a_trial_out_of_device_memory_fails_alone_and_is_not_retried() {
    let host = Host::new();
    let name = common::unique_name("oom");
    let trials = Trials::new(&name, 4, 4, "{gpus: 0.5}", 0.5);
    host.run(&host.study(&trials, Some(2)));
    let trials = host.machine.scratch.trials(&name);
    for trial in &trials {
        if trial["number"] == 2 {
            assert_eq!(trial["state"], "failed", "{trial}");
            assert_eq!(trial["attempt"], 1, "not retried: {trial}");
            let error = trial["error"].as_str().unwrap();
            assert!(
                error.starts_with("the worker ran out of device memory: torch.OutOfMemoryError"),
                "{error}"
            );
        } else {
            assert_eq!(trial["state"], "succeeded", "{trial}");
        }
    }
    host.assert_no_lock_held();
}
