//! The domain model of a study, without I/O: its objective, its search space, how trials are
//! proposed, stopped early and started. The study file ([`crate::spec`]) is read into these
//! types; every other module works on them.

mod constraint;
mod executor;
mod goal;
pub(crate) mod pareto;
pub mod space;
pub(crate) mod stopping;
mod template;
mod warm_start;

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

pub(crate) use constraint::{Bound, Constraint, Constraints};
pub use executor::ExecutorKind;
pub(crate) use executor::{
    Accelerator, ArtifactsVolume, ExecutorSpec, KubernetesSpec, RemoteSettings, Resources,
    SAGEMAKER_DEFAULT_RUNTIME, SHARDS_PER_GPU, SageMakerSpec, SecretRef, SlurmReport, SlurmSpec,
    Toleration, VertexSpec,
};
pub use goal::Goal;
pub(crate) use template::{TEMPLATE_BUILTINS, TemplatePart, template_parts};
pub(crate) use warm_start::{Mapping, Outside, WarmStart, WarmStartError};

use crate::gpus::Share;
use space::Space;
use stopping::StoppingRule;

/// What the study optimises: one metric and its direction.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Objective {
    /// The tag workers report (`accuracy`).
    pub metric: String,
    /// Up or down.
    pub goal: Goal,
    /// The corner of the hypervolume on this objective (`reference_point`, given with
    /// several objectives only); `None`: derived from the trials
    /// (see `pareto::reference_point`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_point: Option<f64>,
}

/// How trials are proposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// Gaussian-process Bayesian optimisation (the default).
    Bayesian,
    /// Independent uniform draws in the unit cube, seeded.
    Random,
    /// Every point of the grid once.
    Grid,
}

/// A worker's program and the fixed arguments after it (`trial.command`). It always names a
/// program: [`WorkerCommand::new`] refuses a command without one.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerCommand {
    /// The program, never blank.
    program: String,
    /// The fixed arguments after it.
    arguments: Vec<String>,
}

impl WorkerCommand {
    /// The command `argv`, its program first; `None` when it names no program (an empty
    /// list, or a blank first word).
    pub fn new(argv: Vec<String>) -> Option<Self> {
        let mut argv = argv.into_iter();
        let program = argv.next().filter(|p| !p.trim().is_empty())?;
        Some(Self {
            program,
            arguments: argv.collect(),
        })
    }

    /// The program.
    pub fn program(&self) -> &str {
        &self.program
    }

    /// The program, then the fixed arguments.
    pub fn argv(&self) -> impl Iterator<Item = &String> {
        std::iter::once(&self.program).chain(&self.arguments)
    }
}

/// How one trial worker is started.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialTemplate {
    /// The worker's program and its fixed arguments; `None` for a study file without
    /// `trial:`, whose trials only ask/tell clients run ([`TrialTemplate::has_worker`]).
    pub command: Option<WorkerCommand>,
    /// Argument template with `{id}` placeholders; when absent each active parameter is
    /// appended as `--<id>=<value>`.
    pub args: Option<Vec<String>>,
    /// Extra environment variables for the worker.
    pub env: BTreeMap<String, String>,
    /// Wall-clock limit of one trial.
    pub timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL when a worker is stopped.
    pub grace_period: Duration,
    /// What GPUs each trial holds while it runs (`trial.resources.gpus`): whole devices, or
    /// a share of one; `None`: the study uses no GPUs.
    pub gpus: Option<Share>,
    /// The cap on each trial's device memory in bytes (`trial.resources.gpu_memory`).
    pub gpu_memory: Option<u64>,
    /// Where the worker runs.
    pub(crate) executor: ExecutorSpec,
}

impl TrialTemplate {
    /// The template of a study file without `trial:`: no worker program; `hptune ask` and
    /// `hptune tell` clients run its trials, and `hptune run` refuses it.
    pub(crate) fn without_worker() -> Self {
        TrialTemplate {
            command: None,
            args: None,
            env: BTreeMap::new(),
            timeout: None,
            // No process of its own to stop.
            grace_period: Duration::ZERO,
            gpus: None,
            gpu_memory: None,
            executor: ExecutorSpec::Local,
        }
    }

    /// Whether the study file names a worker program (`trial.command`), which `hptune run`
    /// starts for each trial.
    pub fn has_worker(&self) -> bool {
        self.command.is_some()
    }
}

/// The trials' model folders (`artifacts`): each attempt of a trial gets a folder of its own,
/// named to the worker by `HPTUNE_OUTPUT_DIR` and `AIP_MODEL_DIR`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Artifacts {
    /// The folder of the studies' model folders (`--artifacts-dir` overrides it); `None`: the
    /// default, beside the logs.
    pub dir: Option<PathBuf>,
    /// Keep the models of the best K trials only; `None`: keep every model.
    pub keep_best: Option<NonZeroUsize>,
}

/// How many trials a study runs, and how many of them may fail: the limits every claim of a
/// trial checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Trials in all (finished or not, across reruns); for grid search at most the grid size;
    /// `None`: until the sampler is exhausted.
    pub max_trial_count: Option<u64>,
    /// Failed trials (of all runs) after which no new trial starts.
    pub max_failed_trial_count: u64,
}

impl Budget {
    /// No limit: trials until the sampler is exhausted, however many fail.
    pub(crate) const UNLIMITED: Budget = Budget {
        max_trial_count: None,
        max_failed_trial_count: u64::MAX,
    };

    /// Whether a study of `trials` trials may have another.
    pub(crate) fn has_room(&self, trials: usize) -> bool {
        self.max_trial_count.is_none_or(|max| (trials as u64) < max)
    }

    /// Whether `failed` failed trials stop the study.
    pub(crate) fn too_many_failures(&self, failed: usize) -> bool {
        failed as u64 >= self.max_failed_trial_count
    }
}

/// A validated study.
#[derive(Debug, Clone)]
pub struct Study {
    /// Unique key of the study in the database.
    pub name: String,
    /// What is optimised: the only objective, or the first of several (the one a trial's
    /// `value` holds).
    pub objective: Objective,
    /// The objectives after the first of a study with several (`objectives:`, 2 to 4 in all);
    /// empty with one.
    pub further_objectives: Vec<Objective>,
    /// The parameters.
    pub space: Space,
    /// How trials are proposed.
    pub algorithm: Algorithm,
    /// Trials in all and failed trials allowed.
    pub budget: Budget,
    /// Trials running at once.
    pub parallel_trial_count: usize,
    /// Further attempts of a trial whose worker was killed from outside (preempted, out of
    /// memory, its controller gone with it); failures of the worker's own code are not retried.
    pub max_retries: u32,
    /// Seed of the sampler.
    pub seed: u64,
    /// The early-stopping rule, if any.
    pub early_stopping: Option<StoppingRule>,
    /// How a worker is started.
    pub trial: TrialTemplate,
    /// Where the trials' models go, and how many are kept.
    pub artifacts: Artifacts,
    /// The bounds the trials' reported metrics must keep, and whether a failed trial counts
    /// as infeasible.
    pub constraints: Constraints,
    /// Configurations to run first, in order, before the sampler proposes (`initial_trials`):
    /// enqueued once, the first time the study runs with them.
    pub initial_trials: Vec<space::Assignment>,
    /// Another study whose finished trials inform the Bayesian model from the start, without
    /// counting toward this study's budget (`warm_start`).
    pub warm_start: Option<WarmStart>,
    /// The file as written, kept in the database.
    pub source: String,
}

impl Study {
    /// Every objective, in the study file's order: the first is [`Study::objective`].
    pub fn objectives(&self) -> impl Iterator<Item = &Objective> {
        std::iter::once(&self.objective).chain(&self.further_objectives)
    }

    /// Whether `recorded` (a stored study's objectives) are this study's: the same metrics
    /// with the same goals in the same order. Reference points may differ: they only place
    /// the hypervolume's corner.
    pub(crate) fn keeps_objectives(&self, recorded: &[Objective]) -> bool {
        recorded.len() == self.objectives().count()
            && recorded
                .iter()
                .zip(self.objectives())
                .all(|(a, b)| a.metric == b.metric && a.goal == b.goal)
    }

    /// Whether the study trades several objectives against each other.
    pub fn has_several_objectives(&self) -> bool {
        !self.further_objectives.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::WorkerCommand;

    fn words(argv: &[&str]) -> Vec<String> {
        argv.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn a_worker_command_always_names_a_program() {
        assert_eq!(WorkerCommand::new(Vec::new()), None);
        assert_eq!(WorkerCommand::new(words(&[" ", "train.py"])), None);
        let command = WorkerCommand::new(words(&["python3", "train.py"])).unwrap();
        assert_eq!(command.program(), "python3");
        assert_eq!(command.argv().collect::<Vec<_>>(), ["python3", "train.py"]);
    }
}
