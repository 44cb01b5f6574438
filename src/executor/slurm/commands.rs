//! Slurm's own commands, run as argv: `sbatch` submits, `scontrol show job` (then `sacct`,
//! where the cluster keeps accounting) says how a job is, `squeue` finds a job by its name,
//! `scancel` cancels. What they print is read here and nowhere else.

use std::collections::HashMap;
use std::path::Path;

use tokio::process::Command;

use crate::executor::WorkerEnd;
use crate::protocol::STORAGE_VARIABLE;

/// A job as Slurm says it is.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Status {
    /// Waiting to start, for this reason of Slurm's (`Resources`, `ReqNodeNotAvail...`).
    Pending(String),
    /// Running, or finishing.
    Active,
    /// Requeued by Slurm (preempted, its node lost, or `scontrol requeue`): it would run
    /// again as the same job, over the files of this attempt.
    Requeued(String),
    /// Over, this way.
    Ended(WorkerEnd),
}

/// What one of Slurm's commands printed.
struct Printed {
    success: bool,
    stdout: String,
    stderr: String,
}

impl Printed {
    /// Its error output, on one line.
    fn error(&self) -> String {
        let lines: Vec<&str> = self
            .stderr
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        match lines.is_empty() {
            true => "it failed without a message".into(),
            false => lines.join("; "),
        }
    }
}

async fn run(program: &str, args: &[String]) -> Result<Printed, String> {
    run_with_storage(program, args, None).await
}

/// Runs `program ARGS`; `HPTUNE_STORAGE` is `storage_url` for it (and so for the job `sbatch`
/// submits, which gets its environment), or unset.
async fn run_with_storage(
    program: &str,
    args: &[String],
    storage_url: Option<&str>,
) -> Result<Printed, String> {
    let mut command = Command::new(program);
    command.args(args).kill_on_drop(true);
    // The database URL may hold a password: only the jobs that report through the database
    // get it.
    match storage_url {
        Some(url) => command.env(STORAGE_VARIABLE, url),
        None => command.env_remove(STORAGE_VARIABLE),
    };
    let output = command
        .output()
        .await
        .map_err(|e| format!("cannot run '{program}': {e}"))?;
    Ok(Printed {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// Submits a job with `sbatch ARGS` (`--parsable` among them), its environment holding
/// `HPTUNE_STORAGE=storage_url` where given; returns its id.
pub(super) async fn submit(args: &[String], storage_url: Option<&str>) -> Result<u64, String> {
    let printed = run_with_storage("sbatch", args, storage_url).await?;
    if !printed.success {
        return Err(format!("sbatch refused the job: {}", printed.error()));
    }
    // `--parsable` prints `id` or `id;cluster`.
    let first = printed.stdout.trim().split(';').next().unwrap_or_default();
    first.parse().map_err(|_| {
        format!(
            "sbatch printed '{}' where a job id was expected",
            printed.stdout.trim()
        )
    })
}

/// Cancels a job: Slurm sends SIGTERM to its processes, and SIGKILL after the cluster's
/// `KillWait`; with `now`, SIGKILL at once.
pub(super) async fn cancel(id: u64, now: bool) -> Result<(), String> {
    let mut args = vec![id.to_string()];
    if now {
        args.splice(0..0, ["--signal=KILL".to_string(), "--full".to_string()]);
    }
    let printed = run("scancel", &args).await?;
    match printed.success {
        true => Ok(()),
        false => Err(format!("scancel {id}: {}", printed.error())),
    }
}

/// How job `id` is: from `scontrol show job` while the controller remembers it, else from
/// `sacct` where the cluster keeps accounting, else from the exit status its script wrote
/// to `exit_file` (a job that reports through files); a job none of them knows has vanished.
pub(super) async fn status(id: u64, exit_file: Option<&Path>) -> Result<Status, String> {
    if let Some(job) = show_job(id).await? {
        return Ok(job.status());
    }
    if let Some(status) = accounted(id).await {
        return Ok(status);
    }
    Ok(Status::Ended(
        exit_file
            .and_then(exit_status_file)
            .unwrap_or(WorkerEnd::Vanished),
    ))
}

/// The job of this user whose name is `name` and whose batch script is `script`, if Slurm
/// knows one.
pub(super) async fn find(name: &str, script: &Path) -> Result<Option<u64>, String> {
    let args = ["--noheader", "--states=all", "--format=%i"].map(String::from);
    let mut args = args.to_vec();
    args.push(format!("--name={name}"));
    let printed = run("squeue", &args).await?;
    if !printed.success {
        return Err(format!("squeue: {}", printed.error()));
    }
    for id in printed
        .stdout
        .split_whitespace()
        .filter_map(|i| i.parse().ok())
    {
        if show_job(id)
            .await?
            .is_some_and(|job| job.is(name) && Path::new(job.field("Command")) == script)
        {
            return Ok(Some(id));
        }
    }
    Ok(None)
}

/// Checks that the cluster has the partitions `names` (a comma-separated list, as `sbatch`
/// takes it), before any job is submitted to them.
pub(super) fn check_partition(names: &str) -> Result<(), String> {
    let output = std::process::Command::new("sinfo")
        .args(["--noheader", "--format=%R"])
        .output()
        .map_err(|e| format!("cannot run 'sinfo': {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let partitions: Vec<&str> = stdout.split_whitespace().collect();
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!("sinfo: {}", stderr.trim()));
    }
    match names.split(',').find(|name| !partitions.contains(name)) {
        None => Ok(()),
        Some(name) => Err(format!(
            "'{name}' is not a partition of this Slurm cluster (its partitions: {})",
            partitions.join(", ")
        )),
    }
}

/// Job `id` as `scontrol show job` shows it, or `None` when the controller does not know
/// the job (it forgets finished jobs after `MinJobAge`).
pub(super) async fn show_job(id: u64) -> Result<Option<ShownJob>, String> {
    let args = ["show", "job", &id.to_string()].map(String::from);
    let printed = run("scontrol", &args).await?;
    if printed.success {
        return Ok(Some(ShownJob::parse(&printed.stdout)));
    }
    match printed.stderr.contains("Invalid job id") {
        true => Ok(None),
        false => Err(format!("scontrol show job {id}: {}", printed.error())),
    }
}

/// The fields of `scontrol show job` that Slurm prints alone on their line, each value being
/// the rest of it: paths, which may hold spaces and `=`.
const WHOLE_LINE_FIELDS: [&str; 5] = ["Command", "WorkDir", "StdErr", "StdIn", "StdOut"];

/// A job as `scontrol show job` (its multi-line form) shows it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ShownJob {
    fields: HashMap<String, String>,
}

impl ShownJob {
    /// Reads what `scontrol show job` printed: `Key=Value` words, the first of each key kept
    /// (a later one could be part of a path), and the paths of [`WHOLE_LINE_FIELDS`] whole.
    fn parse(printed: &str) -> Self {
        let mut fields = HashMap::new();
        for line in printed.lines() {
            let line = line.trim_start();
            let whole = line
                .split_once('=')
                .filter(|(key, _)| WHOLE_LINE_FIELDS.contains(key));
            let pairs: Vec<(&str, &str)> = match whole {
                Some(pair) => vec![pair],
                None => line
                    .split_whitespace()
                    .filter_map(|word| word.split_once('='))
                    .collect(),
            };
            for (key, value) in pairs {
                fields
                    .entry(key.to_string())
                    .or_insert_with(|| value.to_string());
            }
        }
        Self { fields }
    }

    /// The value of field `key`; empty where Slurm printed none.
    pub(super) fn field(&self, key: &str) -> &str {
        self.fields.get(key).map_or("", String::as_str)
    }

    /// Whether this is a job of this user named `name`: a job hptune submitted, not another
    /// that Slurm gave the same id later.
    pub(super) fn is(&self, name: &str) -> bool {
        // `UserId=name(uid)`.
        let uid = self
            .field("UserId")
            .rsplit_once('(')
            .and_then(|(_, uid)| uid.strip_suffix(')')?.parse::<u32>().ok());
        self.field("JobName") == name && uid == Some(nix::unistd::getuid().as_raw())
    }

    /// How the job is.
    fn status(&self) -> Status {
        let restarts = self.field("Restarts").parse().unwrap_or(0);
        status_of(
            self.field("JobState"),
            self.field("Reason"),
            self.field("ExitCode"),
            restarts,
        )
    }
}

/// How job `id` ended, as `sacct` says, where the cluster keeps accounting.
async fn accounted(id: u64) -> Option<Status> {
    let args = [
        "--noheader",
        "--allocations",
        "--parsable2",
        "--format=State,ExitCode",
    ];
    let mut args: Vec<String> = args.map(String::from).to_vec();
    args.push(format!("--jobs={id}"));
    let printed = run("sacct", &args).await.ok()?;
    printed
        .success
        .then(|| accounted_status(&printed.stdout))
        .flatten()
}

/// The status in what `sacct --noheader --allocations --parsable2 --format=State,ExitCode`
/// printed: `STATE|CODE:SIGNAL` on the job's line; `None` where it printed no line (a job it
/// does not know).
fn accounted_status(printed: &str) -> Option<Status> {
    let (state, exit) = printed.lines().next()?.split_once('|')?;
    Some(status_of(state, "", exit, 0))
}

/// The status of a job in `state` (the first word of what Slurm prints), for `reason`,
/// with Slurm's exit code `code:signal` of its script, restarted `restarts` times.
fn status_of(state: &str, reason: &str, exit: &str, restarts: u32) -> Status {
    let state = state.split_whitespace().next().unwrap_or_default();
    let failed = |why: &str| Status::Ended(WorkerEnd::JobFailed(why.to_string()));
    let lost = |why: &str| Status::Ended(WorkerEnd::Preempted(why.to_string()));
    match state {
        "COMPLETED" | "FAILED" => Status::Ended(exit_code(exit)),
        "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" => Status::Requeued(format!(
            "Slurm requeued it ({})",
            if reason.is_empty() { state } else { reason }
        )),
        _ if restarts > 0 => Status::Requeued(format!("Slurm restarted it {restarts} times")),
        "CANCELLED" => failed("it was cancelled in Slurm, not by hptune"),
        "TIMEOUT" => failed("Slurm ended it at its time limit (trial.executor.time)"),
        "OUT_OF_MEMORY" => failed("it ran out of memory (trial.executor.mem)"),
        "DEADLINE" => failed("Slurm ended it at its deadline"),
        "NODE_FAIL" => lost("its node failed"),
        "BOOT_FAIL" => lost("its node failed to boot"),
        "PREEMPTED" => lost("Slurm preempted it"),
        "PENDING" => Status::Pending(reason.to_string()),
        _ => Status::Active,
    }
}

/// The worker's end from Slurm's `code:signal` of the job script.
fn exit_code(exit: &str) -> WorkerEnd {
    let (code, signal) = exit.split_once(':').unwrap_or((exit, "0"));
    match (code.parse::<i32>(), signal.parse::<i32>()) {
        (_, Ok(signal @ 1..)) => WorkerEnd::killed_by(signal),
        (Ok(code), _) => worker_end(code),
        _ => WorkerEnd::JobFailed(format!("Slurm gave the exit code '{exit}'")),
    }
}

/// The worker's end from the exit status its job script wrote, if it wrote one.
pub(super) fn exit_status_file(path: &Path) -> Option<WorkerEnd> {
    let text = std::fs::read_to_string(path).ok()?;
    text.trim().parse().ok().map(worker_end)
}

/// The worker's end from the shell's exit status of it: `128 + N` is a worker killed by
/// signal N.
fn worker_end(status: i32) -> WorkerEnd {
    match status {
        129..=192 => WorkerEnd::killed_by(status - 128),
        code => WorkerEnd::Exited(code),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scontrol_fields_keep_paths_whole_and_the_first_value_of_each_key() {
        let printed = "JobId=7 JobName=hptune-s-0-1\n   UserId=me(1000) GroupId=me(1000)\n   JobState=RUNNING Reason=None Dependency=(null)\n   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0\n   Command=/a b/JobState=X StdOut=/y\n   WorkDir=/w d\n   StdOut=/l d/trial-0.log\n   Power=\n";
        let job = ShownJob::parse(printed);
        assert_eq!(job.field("JobState"), "RUNNING");
        assert_eq!(job.field("Command"), "/a b/JobState=X StdOut=/y");
        assert_eq!(job.field("WorkDir"), "/w d");
        assert_eq!(job.field("StdOut"), "/l d/trial-0.log");
        assert_eq!(job.field("ExitCode"), "0:0");
        assert_eq!(job.field("Nothing"), "");
        assert_eq!(job.status(), Status::Active);
    }

    #[test]
    fn a_job_is_ours_by_its_name_and_user() {
        let uid = nix::unistd::getuid().as_raw();
        let job = |name: &str, uid: u32| {
            ShownJob::parse(&format!(
                "JobId=7 JobName={name}\n   UserId=u({uid}) GroupId=g(1)\n"
            ))
        };
        assert!(job("hptune-s-0-1", uid).is("hptune-s-0-1"));
        assert!(!job("someone-elses", uid).is("hptune-s-0-1"));
        assert!(!job("hptune-s-0-1", uid + 1).is("hptune-s-0-1"));
    }

    #[test]
    fn each_state_of_a_job_has_its_meaning() {
        let ended = |state, exit| match status_of(state, "None", exit, 0) {
            Status::Ended(end) => end,
            other => panic!("{state}: {other:?}"),
        };
        assert_eq!(ended("COMPLETED", "0:0"), WorkerEnd::Exited(0));
        assert_eq!(ended("FAILED", "3:0"), WorkerEnd::Exited(3));
        assert_eq!(ended("FAILED", "137:0"), WorkerEnd::killed_by(9));
        assert_eq!(ended("FAILED", "0:15"), WorkerEnd::killed_by(15));
        assert!(matches!(ended("FAILED", "x"), WorkerEnd::JobFailed(_)));
        let failed = |why: &str| WorkerEnd::JobFailed(why.into());
        let lost = |why: &str| WorkerEnd::Preempted(why.into());
        for (state, exit, end) in [
            (
                "CANCELLED by 0",
                "0:15",
                failed("it was cancelled in Slurm, not by hptune"),
            ),
            (
                "TIMEOUT",
                "0:15",
                failed("Slurm ended it at its time limit (trial.executor.time)"),
            ),
            // What the test cluster's cgroup memory limit gives (scontrol and sacct alike).
            (
                "OUT_OF_MEMORY",
                "0:125",
                failed("it ran out of memory (trial.executor.mem)"),
            ),
            ("DEADLINE", "0:0", failed("Slurm ended it at its deadline")),
            ("NODE_FAIL", "0:0", lost("its node failed")),
            ("BOOT_FAIL", "0:0", lost("its node failed to boot")),
            ("PREEMPTED", "0:15", lost("Slurm preempted it")),
        ] {
            assert_eq!(ended(state, exit), end, "{state}");
        }
        assert_eq!(
            status_of("PENDING", "ReqNodeNotAvail", "0:0", 0),
            Status::Pending("ReqNodeNotAvail".into())
        );
        for active in [
            "RUNNING",
            "COMPLETING",
            "CONFIGURING",
            "SUSPENDED",
            "RESIZING",
            "STOPPED",
        ] {
            assert_eq!(status_of(active, "None", "0:0", 0), Status::Active);
        }
        assert!(matches!(
            status_of("PENDING", "BeginTime", "0:0", 1),
            Status::Requeued(_)
        ));
        for requeued in ["REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"] {
            assert_eq!(
                status_of(requeued, "", "0:0", 0),
                Status::Requeued(format!("Slurm requeued it ({requeued})"))
            );
        }
        assert_eq!(
            status_of("REQUEUED", "JobHeldAdmin", "0:0", 0),
            Status::Requeued("Slurm requeued it (JobHeldAdmin)".into())
        );
    }

    #[test]
    fn sacct_lines_give_the_same_meanings() {
        assert_eq!(
            accounted_status("COMPLETED|0:0\n"),
            Some(Status::Ended(WorkerEnd::Exited(0)))
        );
        assert_eq!(
            accounted_status("OUT_OF_MEMORY|0:125\n"),
            Some(Status::Ended(WorkerEnd::JobFailed(
                "it ran out of memory (trial.executor.mem)".into()
            )))
        );
        assert_eq!(
            accounted_status("NODE_FAIL|0:0\n"),
            Some(Status::Ended(WorkerEnd::Preempted(
                "its node failed".into()
            )))
        );
        assert_eq!(
            accounted_status("CANCELLED by 0|0:15\n"),
            Some(Status::Ended(WorkerEnd::JobFailed(
                "it was cancelled in Slurm, not by hptune".into()
            )))
        );
        assert_eq!(accounted_status(""), None);
        assert_eq!(accounted_status("garbage"), None);
    }

    #[test]
    fn the_exit_status_file_says_how_the_worker_ended() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trial-0.exit");
        assert_eq!(exit_status_file(&path), None);
        std::fs::write(&path, "").unwrap();
        assert_eq!(exit_status_file(&path), None);
        std::fs::write(&path, "2\n").unwrap();
        assert_eq!(exit_status_file(&path), Some(WorkerEnd::Exited(2)));
        std::fs::write(&path, "143\n").unwrap();
        assert_eq!(exit_status_file(&path), Some(WorkerEnd::killed_by(15)));
    }
}
