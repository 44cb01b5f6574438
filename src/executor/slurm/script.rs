//! What is submitted for one trial attempt: the job script, written beside the attempt's log,
//! and the `sbatch` command line that submits it.
//!
//! The script is the only shell text hptune writes: each word in it (program, arguments,
//! environment, file names) is single-quoted, so whatever a parameter's value holds (spaces,
//! quotes, `$`, newlines) reaches the worker as it is. The script runs the worker, then writes
//! its exit status to a file beside the log: Slurm forgets a finished job after a while (and a
//! cluster without accounting keeps no record of it), and a controller that adopts the job
//! later still learns how it ended. A job that reports through the database runs `hptune
//! relay` instead, its files on its node, and writes nothing beside the log.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::executor::TrialJob;
use crate::protocol::{RELAY_LOG_DIR_VARIABLE, error_log_path};
use crate::study::SlurmSpec;

/// The files of one attempt's job, beside its log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct JobFiles {
    /// The job script.
    pub script: PathBuf,
    /// The worker's exit status, written by the script when the worker ends.
    pub exit_status: PathBuf,
}

impl JobFiles {
    /// The job files of the attempt whose log is `log_path`: `trial-N.sbatch` and
    /// `trial-N.exit`.
    pub(super) fn of(log_path: &Path) -> Self {
        Self {
            script: log_path.with_extension("sbatch"),
            exit_status: log_path.with_extension("exit"),
        }
    }
}

/// `text` as one word of a POSIX shell: single-quoted, each `'` written as `'\''`.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The job script of `job`, its files at the (absolute) paths of `files`: it runs the
/// worker, and writes its exit status where the controller reads it.
pub(super) fn job_script(job: &TrialJob, files: &JobFiles) -> Result<String, String> {
    Ok(format!(
        "{header}\
         # The worker runs with the trial's environment; its exit status is then written\n\
         # where the controller reads it.\n\
         {command}\n\
         status=$?\n\
         echo \"$status\" > {exit_status}\n\
         exit \"$status\"\n",
        header = header(job),
        command = command_line(&job.env, &job.argv)?,
        exit_status = quote(&files.exit_status.display().to_string()),
    ))
}

/// The job script of `job` when it reports through the database: it runs `relay` (`hptune
/// relay ... -- <worker argv>`) with `env`, the relay's files in a folder of the job's own
/// on its node, removed when the job ends, however it ends (the relay copies the worker's
/// output to the job's).
pub(super) fn relay_script(
    job: &TrialJob,
    relay: &[String],
    env: &[(String, String)],
) -> Result<String, String> {
    Ok(format!(
        "{header}\
         # It reports through the database: the relay runs the worker and writes what it\n\
         # reports there. Nothing is written to the controller's filesystem.\n\
         {RELAY_LOG_DIR_VARIABLE}=\"${{TMPDIR:-/tmp}}/hptune-job-$SLURM_JOB_ID\"\n\
         export {RELAY_LOG_DIR_VARIABLE}\n\
         # The folder goes however the job ends: scancel, a time limit and preemption send\n\
         # SIGTERM to this shell too, which then exits once the relay has.\n\
         trap 'rm -rf \"${RELAY_LOG_DIR_VARIABLE}\"' EXIT\n\
         trap 'exit 143' TERM\n\
         trap 'exit 130' INT\n\
         {command}\n",
        header = header(job),
        command = command_line(env, relay)?,
    ))
}

/// The script's first lines: the shell, and which attempt it runs.
fn header(job: &TrialJob) -> String {
    format!(
        "#!/bin/sh\n# Trial {} (attempt {}) of the study {}, submitted by hptune.\n",
        job.number,
        job.attempt,
        quote(&job.study)
    )
}

/// The shell command that runs `argv` with `env` added to the environment, each word quoted.
/// `env` sets the variables (whatever their names), then `sh` execs the program: passed to
/// `env` itself, a program whose path holds `=` would be taken for one more variable.
fn command_line(env: &[(String, String)], argv: &[String]) -> Result<String, String> {
    let words = env
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .chain([
            "sh".to_string(),
            "-c".into(),
            r#"exec "$@""#.into(),
            "sh".into(),
        ])
        .chain(argv.iter().cloned());
    let mut command = vec!["env --".to_string()];
    for word in words {
        if word.contains('\0') {
            return Err(format!(
                "{} holds a NUL character, which no command line can",
                quote(&word.replace('\0', "\\0"))
            ));
        }
        command.push(quote(&word));
    }
    Ok(command.join(" \\\n  "))
}

/// The name of the attempt's job: the same for the same attempt, so that a controller that
/// died before it recorded the job's id finds the job by its name (and its log path).
pub(super) fn job_name(job: &TrialJob) -> String {
    let study: String = job
        .study
        .chars()
        .map(|c| match c {
            c if c.is_ascii_alphanumeric() || "-_.".contains(c) => c,
            _ => '_',
        })
        .collect();
    format!("hptune-{study}-{}-{}", job.number, job.attempt)
}

/// Slurm's form of a time limit: `days-hours:minutes:seconds`.
fn slurm_time(limit: Duration) -> String {
    let seconds = limit.as_secs() + u64::from(limit.subsec_nanos() > 0);
    format!(
        "{}-{:02}:{:02}:{:02}",
        seconds / 86_400,
        seconds / 3600 % 24,
        seconds / 60 % 60,
        seconds % 60
    )
}

/// Where the output of a job that reports through the database goes, on its node: a folder
/// every node has (Slurm's default, `slurm-<id>.out` in the working directory, would fail the
/// job on a node without that directory), named by the job's name (`%x`) and id (`%j`).
pub(super) const NODE_OUTPUT: &str = "/tmp/%x-%j.out";

/// `path` as `sbatch --output` and `--error` take it: each `%` (which Slurm would read as
/// the start of a pattern, `%j`) doubled. A path with a backslash is refused: Slurm drops
/// the backslash (it turns patterns off), so the output would go elsewhere.
fn output_pattern(path: &Path) -> Result<String, String> {
    let text = path.display().to_string();
    match text.contains('\\') {
        true => Err(format!(
            "Slurm cannot write a job's output to {text}: it reads a backslash in a path as an escape; run hptune from a folder without one"
        )),
        false => Ok(text.replace('%', "%%")),
    }
}

/// The arguments of `sbatch` that submit `job`'s `script`, the job running in `work_dir`
/// (or in `/tmp`, Slurm's fallback, on a node without it) and its output going to the
/// attempt's log files at `log_path` (absolute) where given, else to [`NODE_OUTPUT`].
pub(super) fn sbatch_args(
    spec: &SlurmSpec,
    job: &TrialJob,
    log_path: Option<&Path>,
    script: &Path,
    work_dir: &Path,
) -> Result<Vec<String>, String> {
    let mut args = vec![
        "--parsable".to_string(),
        format!("--job-name={}", job_name(job)),
    ];
    match log_path {
        Some(log_path) => {
            args.push(format!("--output={}", output_pattern(log_path)?));
            let error_log = output_pattern(&error_log_path(log_path))?;
            args.push(format!("--error={error_log}"));
        }
        None => args.push(format!("--output={NODE_OUTPUT}")),
    }
    args.push(format!("--chdir={}", work_dir.display()));
    let options = [
        ("partition", spec.partition.clone()),
        ("account", spec.account.clone()),
        ("qos", spec.qos.clone()),
        ("time", spec.time.map(slurm_time)),
        ("cpus-per-task", spec.cpus_per_task.map(|n| n.to_string())),
        ("mem", spec.mem.clone()),
        ("gres", spec.gres()),
        ("constraint", spec.constraint.clone()),
    ];
    args.extend(
        options
            .into_iter()
            .filter_map(|(name, value)| Some(format!("--{name}={}", value?))),
    );
    args.extend(spec.extra_args.iter().cloned());
    args.push(script.display().to_string());
    Ok(args)
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroUsize;

    use super::*;
    use crate::executor::Start;
    use crate::gpus::Share;

    fn job(argv: &[&str], env: &[(&str, &str)], log_dir: &Path) -> TrialJob {
        TrialJob {
            study: "it's a study".into(),
            number: 4,
            trial_id: 9,
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            log_path: log_dir.join("trial-4.log"),
            metrics_path: log_dir.join("trial-4.metrics.jsonl"),
            timeout: None,
            grace_period: Duration::from_secs(1),
            metric: "loss".into(),
            start: Start::Fresh,
            params: Default::default(),
            attempt: 2,
            reported: Vec::new(),
            gpu_locks: Vec::new(),
            output_dir: None,
            checkpoints: None,
        }
    }

    /// Runs the script of `job` with `sh`, as Slurm would; returns its stdout and exit code.
    fn run(job: &TrialJob) -> (String, Option<i32>, String) {
        let files = JobFiles::of(&job.log_path);
        std::fs::write(&files.script, job_script(job, &files).unwrap()).unwrap();
        let out = std::process::Command::new("sh")
            .arg(&files.script)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap())
            .output()
            .unwrap();
        let status = std::fs::read_to_string(&files.exit_status).unwrap();
        (
            String::from_utf8(out.stdout).unwrap(),
            out.status.code(),
            status,
        )
    }

    #[test]
    fn every_word_reaches_the_worker_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let tricky = [
            "a b",
            "it's",
            "\"q\"",
            "$HOME",
            "`id`",
            "$(id)",
            "new\nline",
            "--x=1;2",
            "",
        ];
        let mut argv = vec!["printf", "<%s>"];
        argv.extend(tricky);
        let (out, code, status) = run(&job(&argv, &[], dir.path()));
        let expected: String = tricky.iter().map(|w| format!("<{w}>")).collect();
        assert_eq!(out, expected);
        assert_eq!((code, status.as_str()), (Some(0), "0\n"));
    }

    #[test]
    fn the_worker_gets_its_environment_and_its_exit_status_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let argv = ["sh", "-c", "printf %s \"$WEIRD\"; exit 3"];
        let (out, code, status) = run(&job(&argv, &[("WEIRD", "$x 'y' \\")], dir.path()));
        assert_eq!(out, "$x 'y' \\");
        assert_eq!((code, status.as_str()), (Some(3), "3\n"));
    }

    #[test]
    fn a_program_whose_path_holds_an_equals_sign_runs() {
        let dir = tempfile::tempdir().unwrap();
        let program = dir.path().join("a=b");
        std::fs::write(&program, "#!/bin/sh\nprintf '%s|%s' \"$1\" \"$X\"\n").unwrap();
        std::fs::set_permissions(
            &program,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let program = program.display().to_string();
        let (out, code, _) = run(&job(&[&program, "c=d"], &[("X", "y=z")], dir.path()));
        assert_eq!((out.as_str(), code), ("c=d|y=z", Some(0)));
    }

    #[test]
    fn output_paths_reach_slurm_without_patterns() {
        assert_eq!(
            output_pattern(Path::new("/runs/100%/trial-0.log")).unwrap(),
            "/runs/100%%/trial-0.log"
        );
        let error = output_pattern(Path::new(r"/runs/a\b/trial-0.log")).unwrap_err();
        assert!(error.contains("backslash"), "{error}");
    }

    #[test]
    fn a_nul_character_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let job = job(&["w", "a\0b"], &[], dir.path());
        let error = job_script(&job, &JobFiles::of(&job.log_path)).unwrap_err();
        assert!(error.contains("NUL"), "{error}");
    }

    #[test]
    fn a_share_of_a_gpu_asks_for_shards_and_whole_gpus_for_gpus() {
        let gres = |gpus| {
            SlurmSpec {
                gpus,
                ..SlurmSpec::default()
            }
            .gres()
        };
        assert_eq!(gres(None), None);
        assert_eq!(
            gres(Some(Share::Whole(NonZeroUsize::new(3).unwrap()))),
            Some("gpu:3".into())
        );
        // 16 shards per GPU: 1/K of one is 16/K of them.
        for (k, shards) in [(2, 8), (4, 4), (8, 2), (16, 1)] {
            assert_eq!(
                gres(Some(Share::Fraction(k))),
                Some(format!("shard:{shards}"))
            );
        }
    }

    #[test]
    fn sbatch_gets_each_field_as_one_option() {
        let dir = tempfile::tempdir().unwrap();
        let job = job(&["w"], &[], dir.path());
        let spec = SlurmSpec {
            partition: Some("gpu".into()),
            qos: Some("high".into()),
            time: Some(Duration::from_secs(2 * 86_400 + 3 * 3600 + 4 * 60 + 5)),
            cpus_per_task: Some(4),
            mem: Some("16G".into()),
            gpus: Some(Share::Whole(NonZeroUsize::new(2).unwrap())),
            constraint: Some("a100&ib".into()),
            extra_args: vec!["--exclusive".into()],
            ..SlurmSpec::default()
        };
        let files = JobFiles::of(&job.log_path);
        let args = sbatch_args(
            &spec,
            &job,
            Some(&job.log_path),
            &files.script,
            Path::new("/w d"),
        )
        .unwrap();
        let log = job.log_path.display().to_string();
        assert_eq!(
            args,
            [
                "--parsable".to_string(),
                "--job-name=hptune-it_s_a_study-4-2".into(),
                format!("--output={log}"),
                format!("--error={}", log.replace(".log", ".err")),
                "--chdir=/w d".into(),
                "--partition=gpu".into(),
                "--qos=high".into(),
                "--time=2-03:04:05".into(),
                "--cpus-per-task=4".into(),
                "--mem=16G".into(),
                "--gres=gpu:2".into(),
                "--constraint=a100&ib".into(),
                "--exclusive".into(),
                files.script.display().to_string(),
            ]
        );
    }

    #[test]
    fn the_relay_runs_in_a_folder_of_the_jobs_own_removed_at_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let job = job(&[], &[], dir.path());
        let relay = [
            "sh",
            "-c",
            "mkdir -p \"$HPTUNE_RELAY_LOG_DIR\" && echo \"$HPTUNE_RELAY_LOG_DIR|$GREETING\"; exit 4",
        ]
        .map(String::from);
        let env = [("GREETING".to_string(), "a 'b' $c".to_string())];
        let script = dir.path().join("relay.sbatch");
        std::fs::write(&script, relay_script(&job, &relay, &env).unwrap()).unwrap();
        let out = std::process::Command::new("sh")
            .arg(&script)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap())
            .env("TMPDIR", dir.path())
            .env("SLURM_JOB_ID", "77")
            .output()
            .unwrap();
        let folder = dir.path().join("hptune-job-77");
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            format!("{}|a 'b' $c\n", folder.display())
        );
        assert_eq!(out.status.code(), Some(4));
        assert!(!folder.exists());
    }

    #[test]
    fn a_cancelled_relay_job_removes_its_folder_too() {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().unwrap();
        let job = job(&[], &[], dir.path());
        let relay = [
            "sh",
            "-c",
            "mkdir -p \"$HPTUNE_RELAY_LOG_DIR\" && exec sleep 30",
        ]
        .map(String::from);
        let script = dir.path().join("relay.sbatch");
        std::fs::write(&script, relay_script(&job, &relay, &[]).unwrap()).unwrap();
        let mut child = std::process::Command::new("sh")
            .arg(&script)
            .env("TMPDIR", dir.path())
            .env("SLURM_JOB_ID", "78")
            .process_group(0)
            .spawn()
            .unwrap();
        let folder = dir.path().join("hptune-job-78");
        let start = std::time::Instant::now();
        while !folder.exists() {
            assert!(start.elapsed().as_secs() < 10, "the relay never started");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // scancel: SIGTERM to every process of the job.
        let group = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGTERM).unwrap();
        assert_eq!(child.wait().unwrap().code(), Some(143));
        assert!(!folder.exists());
    }

    #[test]
    fn a_job_that_reports_through_the_database_writes_its_output_on_its_node() {
        let dir = tempfile::tempdir().unwrap();
        let job = job(&["w"], &[], dir.path());
        let args = sbatch_args(
            &SlurmSpec::default(),
            &job,
            None,
            Path::new("/s"),
            Path::new("/w"),
        )
        .unwrap();
        assert_eq!(
            args,
            [
                "--parsable",
                "--job-name=hptune-it_s_a_study-4-2",
                "--output=/tmp/%x-%j.out",
                "--chdir=/w",
                "/s"
            ]
        );
    }

    #[test]
    fn a_time_limit_is_rounded_up_to_the_second() {
        assert_eq!(slurm_time(Duration::from_millis(1500)), "0-00:00:02");
        assert_eq!(slurm_time(Duration::from_secs(90 * 60)), "0-01:30:00");
    }
}
