//! The `trial.executor` block of `kind: slurm`: what `sbatch` is asked for.

use std::time::Duration;

use super::Checker;
use super::executor::DEFAULT_OUTAGE_LIMIT;
use super::raw::RawSlurm;
use crate::gpus::Share;
use crate::study::{SHARDS_PER_GPU, SlurmReport, SlurmSpec};

/// How often a Slurm job's state is asked for, when the file does not say.
const DEFAULT_SLURM_POLL_INTERVAL: Duration = Duration::from_secs(5);

/// `sbatch` options that hptune sets itself for each job: `extra_args` may not hold them.
const OWN_OPTIONS: [(&str, Option<&str>); 7] = [
    ("--parsable", None),
    ("--job-name", Some("-J")),
    ("--output", Some("-o")),
    ("--error", Some("-e")),
    ("--chdir", Some("-D")),
    ("--wrap", None),
    ("--array", Some("-a")),
];

/// `sbatch`'s short options that take no value, which may come before another in one word.
const SHORT_FLAGS: &str = "hHIkOQsuvVW";

impl Checker<'_> {
    /// Checks a Slurm block; `timeout` (the trial's) is the job's time limit where the block
    /// gives none.
    pub(super) fn slurm(&mut self, raw: &RawSlurm, timeout: Option<Duration>) -> Option<SlurmSpec> {
        let mut ok = true;
        for (name, value) in [
            ("partition", &raw.partition),
            ("account", &raw.account),
            ("qos", &raw.qos),
            ("constraint", &raw.constraint),
        ] {
            if let Some(value) = value
                && (value.trim().is_empty() || value.contains(char::is_whitespace))
            {
                self.report(
                    format!("trial.executor.{name}"),
                    format!("'{value}' is not a Slurm name: it must be non-empty, without spaces"),
                );
                ok = false;
            }
        }
        if let Some(mem) = &raw.mem
            && !is_memory_size(mem)
        {
            self.report(
                "trial.executor.mem",
                format!(
                    "'{mem}' is not a memory size as Slurm writes it: a number of megabytes, or a number with K, M, G or T (16G)"
                ),
            );
            ok = false;
        }
        for (i, arg) in raw.extra_args.iter().flatten().enumerate() {
            if let Err(message) = check_extra_arg(arg) {
                self.report(format!("trial.executor.extra_args[{i}]"), message);
                ok = false;
            }
        }
        let time = self.duration("trial.executor.time", raw.time.as_deref());
        let poll = self.duration("trial.executor.poll_interval", raw.poll_interval.as_deref());
        let outage_limit =
            self.duration("trial.executor.outage_limit", raw.outage_limit.as_deref());
        let cpus = match raw.cpus_per_task {
            None => Some(None),
            Some(n) => self
                .at_least("trial.executor.cpus_per_task", n, 1)
                .map(|n| Some(n.min(i64::from(u32::MAX)) as u32)),
        };
        let gpus = match raw.gpus {
            None => Some(None),
            Some(number) if number.as_i64() == Some(0) => Some(None),
            Some(number) => self
                .share("trial.executor.gpus", number, "0 for jobs without GPUs")
                .and_then(|share| self.sharded(share))
                .map(Some),
        };
        let report = match raw.report.as_deref() {
            None => Some(SlurmReport::Files),
            Some(text) => SlurmReport::parse(text).or_else(|| {
                self.report(
                    "trial.executor.report",
                    format!(
                        "'{text}' is not a way to report: use {}",
                        SlurmReport::NAMES
                    ),
                );
                None
            }),
        };
        let spec = SlurmSpec {
            partition: raw.partition.clone(),
            account: raw.account.clone(),
            qos: raw.qos.clone(),
            time: time?.or(timeout),
            cpus_per_task: cpus?,
            mem: raw.mem.clone(),
            gpus: gpus?,
            constraint: raw.constraint.clone(),
            extra_args: raw.extra_args.clone().unwrap_or_default(),
            poll_interval: poll?.unwrap_or(DEFAULT_SLURM_POLL_INTERVAL),
            outage_limit: outage_limit?.unwrap_or(DEFAULT_OUTAGE_LIMIT),
            report: report?,
        };
        ok.then_some(spec)
    }

    /// A share of a GPU that Slurm's shards can give: `1/K` for a `K` that divides
    /// [`SHARDS_PER_GPU`] (a job gets `SHARDS_PER_GPU / K` shards, so at most `K` jobs share a
    /// GPU).
    fn sharded(&mut self, share: Share) -> Option<Share> {
        match share {
            Share::Fraction(k) if !SHARDS_PER_GPU.is_multiple_of(k) => {
                let shares: Vec<String> = (2..=SHARDS_PER_GPU)
                    .filter(|k| SHARDS_PER_GPU.is_multiple_of(*k))
                    .map(|k| format!("1/{k}"))
                    .collect();
                self.report(
                    "trial.executor.gpus",
                    format!(
                        "1/{k} of a GPU is not a whole number of Slurm shards: hptune assumes {SHARDS_PER_GPU} shards per GPU (docs/study-file.md), so a Slurm job holds whole GPUs or {}",
                        shares.join(", ")
                    ),
                );
                None
            }
            _ => Some(share),
        }
    }
}

/// Whether `text` is a memory size as `sbatch --mem` takes it: digits, then at most one of
/// the units K, M, G, T.
fn is_memory_size(text: &str) -> bool {
    let digits = text.trim_end_matches(['K', 'M', 'G', 'T', 'k', 'm', 'g', 't']);
    text.len() - digits.len() <= 1
        && !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
}

/// Checks one of `extra_args`: an option of `sbatch`, not one that hptune sets itself,
/// written in full or abbreviated (`sbatch` takes any prefix of a long option that names no
/// other: `--arr` is `--array`), or as a short option, alone or after flags (`-Ho x`).
fn check_extra_arg(arg: &str) -> Result<(), String> {
    let own = |long: &str| {
        Err(format!(
            "'{arg}' is sbatch's {long}, which hptune sets itself for each job (its name, its log files, its directory): leave it out"
        ))
    };
    if let Some(long) = arg.strip_prefix("--") {
        let name = long.split_once('=').map_or(long, |(name, _)| name);
        if name.is_empty() {
            return Err(format!(
                "'{arg}' ends sbatch's options, and the job script must come after them: leave it out"
            ));
        }
        return match OWN_OPTIONS
            .iter()
            .find(|(own, _)| own[2..].starts_with(name))
        {
            Some((long, _)) => own(long),
            None => Ok(()),
        };
    }
    let Some(shorts) = arg.strip_prefix('-').filter(|s| !s.is_empty()) else {
        return Err(format!(
            "'{arg}' is not an sbatch option (options start with '-'; write one with its value: --nodelist=n1)"
        ));
    };
    for short in shorts.chars() {
        if let Some((long, _)) = OWN_OPTIONS
            .iter()
            .find(|(_, own)| own.is_some_and(|own| own[1..].starts_with(short)))
        {
            return own(long);
        }
        // What follows an option that takes a value is its value.
        if !SHORT_FLAGS.contains(short) {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sizes_are_slurms() {
        for good in ["500", "16G", "512M", "1t", "64k"] {
            assert!(is_memory_size(good), "{good}");
        }
        for bad in ["", "G", "16GB", "1.5G", "-1G", "16 G"] {
            assert!(!is_memory_size(bad), "{bad}");
        }
    }

    #[test]
    fn extra_args_are_options_hptune_does_not_set() {
        assert!(check_extra_arg("--exclusive").is_ok());
        assert!(check_extra_arg("--nodelist=n1").is_ok());
        assert!(check_extra_arg("-w").is_ok());
        assert!(
            check_extra_arg("exclusive")
                .unwrap_err()
                .contains("not an sbatch option")
        );
        for own in [
            "--output=x",
            "-ox",
            "--job-name=j",
            "-D/tmp",
            "--parsable",
            "--array=1-3",
            // Abbreviated, as sbatch takes them.
            "--arr=0-2",
            "--out=x",
            "--o=x",
            "--job=j",
            "--ch=/tmp",
            "--wr=true",
            "--err",
            // After flags that take no value.
            "-Hox",
            "-vvD/tmp",
        ] {
            assert!(
                check_extra_arg(own).unwrap_err().contains("itself"),
                "{own}"
            );
        }
        assert!(
            check_extra_arg("--arr=0-2")
                .unwrap_err()
                .starts_with("'--arr=0-2' is sbatch's --array")
        );
        assert!(
            check_extra_arg("--")
                .unwrap_err()
                .contains("ends sbatch's options")
        );
        // Options that merely begin like one of hptune's, and values that hold its letters.
        for other in [
            "--exclusive",
            "--part=gpu",
            "--export=ALL",
            "--open-mode=append",
            "-wnode-d",
            "-t10",
            "-c4",
        ] {
            assert!(check_extra_arg(other).is_ok(), "{other}");
        }
    }
}
