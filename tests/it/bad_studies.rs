//! Malformed study files: each is refused before anything runs, with exit code 2 and a
//! message that names the file, the place and the field, and never a panic.

use crate::common;

use common::{Scratch, assert_success, stderr, stdout};

const GOOD: &str = r#"name: bad
objective:
  metric: loss
  goal: minimize
parameters:
  - id: lr
    type: double
    min: 0.001
    max: 0.1
    scale: log
  - id: opt
    type: categorical
    values: [adam, sgd]
  - id: momentum
    type: double
    min: 0.1
    max: 0.9
    when: {opt: [sgd]}
  - id: batch
    type: discrete
    values: [8, 16, 32]
algorithm: random
max_trial_count: 3
parallel_trial_count: 1
trial:
  command: [sh, -c, "echo loss=1"]
  timeout: 10s
"#;

/// (what is broken, how, what the message must contain)
fn cases() -> Vec<(&'static str, String, &'static str)> {
    let edit = |from: &str, to: &str| {
        assert!(GOOD.contains(from), "{from}");
        GOOD.replacen(from, to, 1)
    };
    vec![
        (
            "invalid YAML",
            edit("values: [adam, sgd]", "values: [adam, sgd"),
            "study.yaml:",
        ),
        ("empty file", String::new(), "the file is empty"),
        (
            "not a mapping",
            "- just\n- a list\n".into(),
            "study.yaml:1:1",
        ),
        (
            "missing name",
            edit("name: bad\n", ""),
            "missing field `name`",
        ),
        (
            "missing objective",
            edit("objective:\n  metric: loss\n  goal: minimize\n", ""),
            "missing field `objective`",
        ),
        (
            "missing trial (which only ask/tell clients may leave out)",
            GOOD[..GOOD.find("trial:").unwrap()].to_string(),
            "no `trial:` block: `hptune run` starts each trial's worker",
        ),
        (
            "unknown top-level field",
            edit("algorithm: random", "algorithm: random\nmax_trials: 3"),
            "study.yaml:23:1: unknown field `max_trials`",
        ),
        (
            "unknown parameter field",
            edit("    scale: log", "    scale: log\n    step: 2"),
            "parameters[0]: unknown field `step`",
        ),
        (
            "wrong type of max_trial_count",
            edit("max_trial_count: 3", "max_trial_count: many"),
            "max_trial_count: invalid type: string \"many\"",
        ),
        (
            "wrong type of min",
            edit("min: 0.001", "min: [1]"),
            "parameters[0].min: invalid type: sequence",
        ),
        (
            "a metric no line can report",
            edit("metric: loss", "metric: acc@1"),
            "study.yaml:3:11: objective.metric: 'acc@1' cannot be reported as acc@1=<value>",
        ),
        (
            "a step key as the metric",
            edit("metric: loss", "metric: epoch"),
            "study.yaml:3:11: objective.metric: 'epoch' gives a measurement's step",
        ),
        (
            "a constraint on a metric no line can report",
            edit(
                "algorithm: random",
                "algorithm: random\nconstraints: [{metric: mem@gpu, max: 1}]",
            ),
            "constraints[0].metric: 'mem@gpu' cannot be reported",
        ),
        (
            "bad goal",
            edit("goal: minimize", "goal: lowest"),
            "study.yaml:4:9: objective.goal: 'lowest' is not a goal: use maximize or minimize",
        ),
        (
            "bad algorithm",
            edit("algorithm: random", "algorithm: cmaes"),
            "algorithm: 'cmaes' is not an algorithm",
        ),
        (
            "bad parameter type",
            edit("type: discrete", "type: float"),
            "parameters[3].type: 'float' is not a parameter type",
        ),
        (
            "bad scale",
            edit("scale: log", "scale: logarithmic"),
            "parameters[0].scale: 'logarithmic' is not a scale: use linear, log or reverse_log",
        ),
        (
            "log scale with min 0",
            edit("min: 0.001", "min: 0"),
            "study.yaml:8:10: parameters[0].min: log scale needs min > 0",
        ),
        (
            "min above max",
            edit("max: 0.9", "max: 0.05"),
            "parameters[2].max: max must be > min, got min 0.1 and max 0.05",
        ),
        (
            "min above max, far below 1",
            edit("min: 0.001", "min: 1e-300").replace("max: 0.1\n", "max: 1e-301\n"),
            "parameters[0].max: max must be > min, got min 1e-300 and max 1e-301",
        ),
        (
            "missing max",
            edit("    max: 0.1\n", ""),
            "parameters[0]: a double parameter needs `max`",
        ),
        (
            "empty values",
            edit("values: [8, 16, 32]", "values: []"),
            "parameters[3].values: must list at least one value",
        ),
        (
            "discrete values out of order",
            edit("values: [8, 16, 32]", "values: [8, 32, 16]"),
            "parameters[3].values[2]: discrete values must increase",
        ),
        (
            "discrete value not a number",
            edit("values: [8, 16, 32]", "values: [8, big]"),
            "parameters[3].values[1]: 'big' is not a number",
        ),
        (
            "duplicate categorical value",
            edit("values: [adam, sgd]", "values: [adam, adam]"),
            "parameters[1].values[1]: duplicate value 'adam'",
        ),
        (
            "duplicate id",
            edit("  - id: batch", "  - id: lr"),
            "parameters[3].id: duplicate id 'lr'",
        ),
        (
            "bad id",
            edit("  - id: batch", "  - id: 9 lives"),
            "parameters[3].id: '9 lives' is not a valid id",
        ),
        (
            "min on a categorical",
            edit(
                "    values: [adam, sgd]",
                "    values: [adam, sgd]\n    min: 1",
            ),
            "parameters[1].min: does not apply to a categorical parameter",
        ),
        (
            "when names an unknown parameter",
            edit("when: {opt: [sgd]}", "when: {optimizer: [sgd]}"),
            "parameters[2].when.optimizer: 'optimizer' is not a parameter defined before 'momentum'",
        ),
        (
            "when names a value the parent lacks",
            edit("when: {opt: [sgd]}", "when: {opt: [rmsprop]}"),
            "parameters[2].when.opt[0]: 'rmsprop' is not one of adam, sgd of 'opt'",
        ),
        (
            "when on a double parent",
            edit("when: {opt: [sgd]}", "when: {lr: [0.01]}"),
            "'lr' is a double: a condition needs a categorical, discrete or integer parent",
        ),
        (
            "parallel_trial_count 0",
            edit("parallel_trial_count: 1", "parallel_trial_count: 0"),
            "parallel_trial_count: must be >= 1, got 0",
        ),
        (
            "negative max_trial_count",
            edit("max_trial_count: 3", "max_trial_count: -3"),
            "max_trial_count: must be >= 1, got -3",
        ),
        (
            "max_trial_count missing for random search",
            edit("max_trial_count: 3\n", ""),
            "max_trial_count: is required",
        ),
        (
            "grid search over a double without grid_points",
            edit("algorithm: random", "algorithm: grid"),
            "grid search cannot enumerate the double parameter 'lr': give it `grid_points: N`",
        ),
        (
            "empty command",
            edit("command: [sh, -c, \"echo loss=1\"]", "command: []"),
            "study.yaml:26:12: trial.command: must name the worker program",
        ),
        (
            "blank program",
            edit("command: [sh, -c, \"echo loss=1\"]", "command: [\" \", -c]"),
            "study.yaml:26:12: trial.command: must name the worker program",
        ),
        (
            "bad timeout",
            edit("timeout: 10s", "timeout: ten seconds"),
            "trial.timeout: 'ten seconds' is not a duration",
        ),
        (
            "args template naming an unknown parameter",
            edit(
                "  timeout: 10s",
                "  timeout: 10s\n  args: ['--lr={learning_rate}']",
            ),
            "trial.args[0]: '{learning_rate}' names no parameter",
        ),
        (
            "unknown executor",
            edit("  timeout: 10s", "  timeout: 10s\n  executor: {kind: lsf}"),
            "trial.executor.kind: 'lsf' is not an executor: use local, vertex, kubernetes, sagemaker or slurm",
        ),
        (
            "a field of a cloud engine in a Slurm block",
            executor("kind: slurm\n    image: i"),
            "trial.executor.image: does not apply to the slurm executor",
        ),
        (
            "negative Slurm GPUs",
            executor("kind: slurm\n    gpus: -1"),
            "study.yaml:30:11: trial.executor.gpus: must be whole GPUs from 1 to 1024, or 1/K of one GPU for a whole K from 2 to 16 (0.5, 0.25, 0.125, ...), got -1 (0 for jobs without GPUs)",
        ),
        (
            "a Slurm share of a GPU that is not 1/K",
            executor("kind: slurm\n    gpus: 0.3"),
            "study.yaml:30:11: trial.executor.gpus: 0.3 is neither a whole number of GPUs nor 1/K of one",
        ),
        (
            "a Slurm share of a GPU that is no whole number of shards",
            executor("kind: slurm\n    gpus: 0.2"),
            "trial.executor.gpus: 1/5 of a GPU is not a whole number of Slurm shards: hptune assumes 16 shards per GPU (docs/study-file.md), so a Slurm job holds whole GPUs or 1/2, 1/4, 1/8, 1/16",
        ),
        (
            "a share of a Vertex AI accelerator",
            executor(
                "kind: vertex\n    project: p\n    region: r\n    image: i\n    machine_type: m\n    accelerator: {type: NVIDIA_TESLA_T4, count: 0.5}",
            ),
            "trial.executor.accelerator.count: 0.5 is a share of a GPU, which a vertex job cannot ask for: Vertex AI gives a job whole accelerators; for a smaller device choose a smaller accelerator type",
        ),
        (
            "a share of a Kubernetes GPU",
            executor("kind: kubernetes\n    image: i\n    resources: {gpu: 0.25}"),
            "trial.executor.resources.gpu: 0.25 is a share of a GPU, which a kubernetes job cannot ask for: Kubernetes schedules whole nvidia.com/gpu devices; to share one, have the cluster's NVIDIA device plugin time-slice its GPUs (sharing.timeSlicing replicas) or split them with MIG",
        ),
        (
            "a share of a GPU on SageMaker",
            executor(
                "kind: sagemaker\n    region: r\n    image: i\n    role_arn: arn:aws:iam::1:role/r\n    instance_type: ml.g5.xlarge\n    output_path: s3://b/p\n    gpus: 0.25",
            ),
            "trial.executor.gpus: 0.25 is a share of a GPU, which a sagemaker job cannot ask for: SageMaker gives a job whole instances; choose an instance_type with fewer or smaller GPUs",
        ),
        (
            "a share of a GPU on Kubernetes, written as Slurm's gpus",
            executor("kind: kubernetes\n    image: i\n    gpus: 0.5"),
            "trial.executor.gpus: 0.5 is a share of a GPU, which a kubernetes job cannot ask for: Kubernetes schedules whole nvidia.com/gpu devices",
        ),
        (
            "whole GPUs on Vertex AI, written as Slurm's gpus",
            executor(
                "kind: vertex\n    project: p\n    region: r\n    image: i\n    machine_type: m\n    gpus: 2",
            ),
            "trial.executor.gpus: is the Slurm executor's; a vertex job asks for GPUs in trial.executor: accelerator: {type: NVIDIA_TESLA_T4, count: 1}",
        ),
        (
            "Slurm CPUs that are not a number",
            executor("kind: slurm\n    cpus_per_task: four"),
            "study.yaml:30:20: trial.executor.cpus_per_task: invalid type: string \"four\", expected i64",
        ),
        (
            "a Slurm memory size with a unit sbatch does not take",
            executor("kind: slurm\n    mem: 16GB"),
            "study.yaml:30:10: trial.executor.mem: '16GB' is not a memory size as Slurm writes it",
        ),
        (
            "a Slurm time limit that is not a duration",
            executor("kind: slurm\n    time: two hours"),
            "study.yaml:30:11: trial.executor.time: 'two hours' is not a duration",
        ),
        (
            "a Slurm partition with a space",
            executor("kind: slurm\n    partition: 'gpu a100'"),
            "study.yaml:30:16: trial.executor.partition: 'gpu a100' is not a Slurm name",
        ),
        (
            "an sbatch option hptune sets itself",
            executor("kind: slurm\n    extra_args: [--exclusive, --output=mine.log]"),
            "study.yaml:30:31: trial.executor.extra_args[1]: '--output=mine.log' is sbatch's --output, which hptune sets itself",
        ),
        (
            "an sbatch option hptune sets itself, abbreviated",
            executor("kind: slurm\n    extra_args: [--exclusive, --arr=0-2]"),
            "study.yaml:30:31: trial.executor.extra_args[1]: '--arr=0-2' is sbatch's --array, which hptune sets itself",
        ),
        (
            "a word of extra_args that is not an option",
            executor("kind: slurm\n    extra_args: [--nodelist, n1]"),
            "trial.executor.extra_args[1]: 'n1' is not an sbatch option",
        ),
        (
            "vertex executor without its project",
            executor(
                "kind: vertex\n    region: us-central1\n    image: i\n    machine_type: n1-standard-4",
            ),
            "trial.executor: the vertex executor needs `project`",
        ),
        (
            "a field of another executor",
            executor("kind: kubernetes\n    image: i\n    role_arn: arn:aws:iam::1:role/r"),
            "trial.executor.role_arn: does not apply to the kubernetes executor",
        ),
        (
            "an image for local workers",
            executor("kind: local\n    image: i"),
            "trial.executor.image: does not apply to the local executor",
        ),
        (
            "unknown executor field",
            executor("kind: kubernetes\n    imag: i"),
            "trial.executor: unknown field `imag`",
        ),
        (
            "a field of the wrong type in an executor block",
            executor("kind: sagemaker\n    region: r\n    instance_count: many"),
            "study.yaml:31:21: trial.executor.instance_count: invalid type: string \"many\", expected i64",
        ),
        (
            "a field of another stopping rule",
            edit(
                "algorithm: random",
                "algorithm: random\nearly_stopping: {rule: median, reduction_factor: 2}",
            ),
            "early_stopping.reduction_factor: does not apply to the median rule",
        ),
        (
            "unknown stopping field",
            edit(
                "algorithm: random",
                "algorithm: random\nearly_stopping: {rule: asha, min_step: 2}",
            ),
            "early_stopping: unknown field `min_step`, expected one of `min_resource`, `reduction_factor`, `max_resource`, `fidelity`",
        ),
        (
            "curves ending before the first rung",
            edit(
                "algorithm: random",
                "algorithm: random\nearly_stopping: {rule: asha, min_resource: 3, max_resource: 2}",
            ),
            "early_stopping.max_resource: must be >= 3, got 2",
        ),
        (
            "an unknown fidelity setting",
            edit(
                "algorithm: random",
                "algorithm: random\nearly_stopping: {rule: asha, fidelity: curves}",
            ),
            "early_stopping.fidelity: 'curves' is not a fidelity setting: use model or off",
        ),
        (
            "endpoint not a URL",
            executor("kind: kubernetes\n    image: i\n    endpoint: ftp://cluster"),
            "trial.executor.endpoint: 'ftp://cluster' is not an http:// or https:// URL",
        ),
        (
            "bad poll interval",
            executor("kind: kubernetes\n    image: i\n    poll_interval: often"),
            "trial.executor.poll_interval: 'often' is not a duration",
        ),
        (
            "no accelerators",
            executor(
                "kind: vertex\n    project: p\n    region: r\n    image: i\n    machine_type: m\n    accelerator: {type: NVIDIA_TESLA_T4, count: 0}",
            ),
            "trial.executor.accelerator.count: must be >= 1, got 0",
        ),
        (
            "unknown resource",
            executor("kind: kubernetes\n    image: i\n    resources: {tpu: 1}"),
            "unknown field `tpu`, expected one of `cpu`, `memory`, `gpu`",
        ),
        (
            "role that is not an ARN",
            executor(
                "kind: sagemaker\n    region: r\n    image: i\n    role_arn: MyRole\n    instance_type: ml.m5.large\n    output_path: s3://b/p",
            ),
            "trial.executor.role_arn: must be an IAM role's ARN",
        ),
        (
            "output path outside S3",
            executor(
                "kind: sagemaker\n    region: r\n    image: i\n    role_arn: arn:aws:iam::1:role/r\n    instance_type: ml.m5.large\n    output_path: /tmp/out",
            ),
            "trial.executor.output_path: must be an S3 URL (s3://bucket/prefix), not '/tmp/out'",
        ),
        (
            "a Vertex output folder outside Cloud Storage",
            executor(
                "kind: vertex\n    project: p\n    region: r\n    image: i\n    machine_type: m\n    base_output_dir: s3://b/p",
            ),
            "trial.executor.base_output_dir: must be a Cloud Storage URL (gs://bucket/prefix), not 's3://b/p'",
        ),
        (
            "a Vertex output folder without a bucket",
            executor(
                "kind: vertex\n    project: p\n    region: r\n    image: i\n    machine_type: m\n    base_output_dir: gs:///p",
            ),
            "trial.executor.base_output_dir: must be a Cloud Storage URL (gs://bucket/prefix), not 'gs:///p'",
        ),
        (
            "a spot job's wait without spot capacity",
            executor(
                "kind: sagemaker\n    region: r\n    image: i\n    role_arn: arn:aws:iam::1:role/r\n    instance_type: ml.m5.large\n    output_path: s3://b/p\n    max_wait: 2h",
            ),
            "trial.executor.max_wait: is the time a spot job may wait for capacity: set spot: true too",
        ),
        (
            "a spot job's wait shorter than its run time",
            executor(
                "kind: sagemaker\n    region: r\n    image: i\n    role_arn: arn:aws:iam::1:role/r\n    instance_type: ml.m5.large\n    output_path: s3://b/p\n    spot: true\n    max_wait: 5s",
            ),
            "trial.executor.max_wait: 5s is shorter than the job's run time (10s,",
        ),
        (
            "a toleration of any value with a value",
            executor(
                "kind: kubernetes\n    image: i\n    tolerations: [{key: spot, operator: Exists, value: 'true'}]",
            ),
            "trial.executor.tolerations[0]: `value` must be absent with operator Exists",
        ),
        (
            "a toleration of an unknown effect",
            executor(
                "kind: kubernetes\n    image: i\n    tolerations: [{key: spot, value: 'true', effect: NoRun}]",
            ),
            "trial.executor.tolerations[0].effect: must be NoSchedule, PreferNoSchedule or NoExecute",
        ),
        (
            "a models volume whose claim is no name",
            executor(
                "kind: kubernetes\n    image: i\n    artifacts_volume: {claim: My_Models, mount_path: /models}",
            ),
            "trial.executor.artifacts_volume.claim: 'My_Models' is not a PersistentVolumeClaim's name",
        ),
        (
            "a models volume mounted at a relative path",
            executor(
                "kind: kubernetes\n    image: i\n    artifacts_volume: {claim: models, mount_path: models}",
            ),
            "trial.executor.artifacts_volume.mount_path: 'models' is not an absolute path other than /",
        ),
        (
            "a models volume without its mount path",
            executor("kind: kubernetes\n    image: i\n    artifacts_volume: {claim: models}"),
            "trial.executor.artifacts_volume: missing field `mount_path`",
        ),
        (
            "a models volume on a SageMaker job",
            executor(
                "kind: sagemaker\n    region: r\n    image: i\n    role_arn: arn:aws:iam::1:role/r\n    instance_type: ml.m5.large\n    output_path: s3://b/p\n    artifacts_volume: {claim: models, mount_path: /models}",
            ),
            "trial.executor.artifacts_volume: does not apply to the sagemaker executor",
        ),
        (
            "a name that climbs out of the log folder",
            edit("name: bad", "name: ../x"),
            "study.yaml:1:7: name: '../x' is not a valid study name: a study name is 1 to 128 letters, digits, '.', '_' and '-', starting with a letter or a digit",
        ),
        (
            "'..' as the name",
            edit("name: bad", "name: '..'"),
            "name: '..' is not a valid study name",
        ),
        (
            "a name that names the same folder as another",
            edit("name: bad", "name: ./bad"),
            "name: './bad' is not a valid study name",
        ),
        (
            "a name with a folder in it",
            edit("name: bad", "name: col/sub"),
            "name: 'col/sub' is not a valid study name",
        ),
        (
            "a name with a line break",
            edit("name: bad", "name: \"a\\nb\""),
            "name: 'a\\nb' is not a valid study name",
        ),
        (
            "a name with NUL",
            edit("name: bad", "name: \"a\\0b\""),
            "name: 'a\\0b' is not a valid study name",
        ),
        (
            "a name longer than a file name may be",
            edit("name: bad", &format!("name: {}", "n".repeat(300))),
            "has 300 characters: a study name is 1 to 128",
        ),
        (
            "an empty name",
            edit("name: bad", "name: ''"),
            "name: must not be empty",
        ),
        (
            "an integer minimum below i64",
            edit(
                "type: discrete\n    values: [8, 16, 32]",
                "type: integer\n    min: -1e30\n    max: 4",
            ),
            "parameters[3].min: must be an integer from -9223372036854775808 to 9223372036854775807, got -1e30",
        ),
        (
            "an integer maximum above i64",
            edit(
                "type: discrete\n    values: [8, 16, 32]",
                "type: integer\n    min: 1\n    max: 99999999999999999999",
            ),
            "parameters[3].max: must be an integer from -9223372036854775808 to 9223372036854775807, got 99999999999999999999",
        ),
        (
            "grid_points past the largest grid",
            edit("    scale: log", "    scale: log\n    grid_points: 1000001"),
            "parameters[0].grid_points: must be from 1 to 1000000",
        ),
        (
            "trial.env setting the trial's number",
            edit(
                "  timeout: 10s",
                "  timeout: 10s\n  env:\n    MINE: x\n    HPTUNE_TRIAL_ID: '7'",
            ),
            "study.yaml:30:22: trial.env.HPTUNE_TRIAL_ID: HPTUNE_TRIAL_ID is set by hptune for every worker (the worker protocol)",
        ),
        (
            "trial.env setting cloudml-hypertune's metrics file",
            edit(
                "  timeout: 10s",
                "  timeout: 10s\n  env: {CLOUD_ML_HP_METRIC_FILE: /tmp/m}",
            ),
            "trial.env.CLOUD_ML_HP_METRIC_FILE: CLOUD_ML_HP_METRIC_FILE is set by hptune",
        ),
        (
            "trial.env with a name no environment can hold",
            edit("  timeout: 10s", "  timeout: 10s\n  env: {\"A=B\": x}"),
            "trial.env.A=B: 'A=B' is not a variable name",
        ),
        (
            "trial.env with a NUL in a value",
            edit("  timeout: 10s", "  timeout: 10s\n  env: {A: \"x\\0y\"}"),
            "trial.env.A: the value holds a NUL character",
        ),
        (
            "no GPU asked for",
            edit("  timeout: 10s", "  timeout: 10s\n  resources: {gpus: 0}"),
            "study.yaml:28:21: trial.resources.gpus: must be whole GPUs from 1 to 1024, or 1/K of one GPU for a whole K from 2 to 16 (0.5, 0.25, 0.125, ...), got 0",
        ),
        (
            "a fraction of a GPU that is not 1/K of one",
            edit("  timeout: 10s", "  timeout: 10s\n  resources: {gpus: 0.3}"),
            "study.yaml:28:21: trial.resources.gpus: 0.3 is neither a whole number of GPUs nor 1/K of one",
        ),
        (
            "GPUs as text",
            edit("  timeout: 10s", "  timeout: 10s\n  resources: {gpus: all}"),
            "trial.resources.gpus: invalid type: string \"all\"",
        ),
        (
            "an unknown resource",
            edit("  timeout: 10s", "  timeout: 10s\n  resources: {cpus: 2}"),
            "trial.resources: unknown field `cpus`",
        ),
        (
            "CUDA_VISIBLE_DEVICES set by hand for a study with GPUs",
            edit(
                "  timeout: 10s",
                "  timeout: 10s\n  resources: {gpus: 1}\n  env: {CUDA_VISIBLE_DEVICES: '0'}",
            ),
            "trial.env.CUDA_VISIBLE_DEVICES: CUDA_VISIBLE_DEVICES is set by hptune to each trial's own devices",
        ),
        (
            "GPUs of a remote job asked for as a local worker's",
            edit(
                "  timeout: 10s",
                "  timeout: 10s\n  resources: {gpus: 1}\n  executor: {kind: kubernetes, image: i}",
            ),
            "trial.resources.gpus: is for local workers; a kubernetes job asks for GPUs in trial.executor: resources: {gpu: 1}",
        ),
        (
            "GPUs of a Slurm job asked for as a local worker's",
            edit(
                "  timeout: 10s",
                "  timeout: 10s\n  resources: {gpus: 1}\n  executor: {kind: slurm}",
            ),
            "trial.resources.gpus: is for local workers; a slurm job asks for GPUs in trial.executor: gpus: 1",
        ),
    ]
}

/// The good study with this executor block (its fields indented under `executor:`).
fn executor(block: &str) -> String {
    GOOD.replacen(
        "  timeout: 10s",
        &format!("  timeout: 10s\n  executor:\n    {block}"),
        1,
    )
}

#[test]
fn every_malformed_study_is_refused_with_exit_code_2_and_a_message_naming_the_field() {
    let scratch = Scratch::new();
    let good = scratch.study("study.yaml", GOOD);
    let out = scratch.hptune(&["run", good.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "the good study must run: {}",
        stderr(&out)
    );

    let cases = cases();
    assert!(cases.len() >= 20);
    let mut failures = Vec::new();
    for (what, text, expected) in &cases {
        let path = scratch.study("study.yaml", text);
        let out = scratch.hptune(&["run", path.to_str().unwrap()]);
        let message = stderr(&out);
        if out.status.code() != Some(2)
            || !message.contains(expected)
            || !message.contains("study.yaml")
            || message.contains("panicked")
        {
            failures.push(format!(
                "{what}: exit {:?}, expected '{expected}' in:\n{message}",
                out.status.code()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // Nothing was added to the study by the refused files.
    assert_eq!(scratch.trials("bad").len(), 3);
}

#[test]
fn several_broken_rules_are_reported_together_in_file_order() {
    let scratch = Scratch::new();
    let text = GOOD
        .replace("goal: minimize", "goal: up")
        .replace("parallel_trial_count: 1", "parallel_trial_count: 0");
    let path = scratch.study("study.yaml", &text);
    let out = scratch.hptune(&["run", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let message = stderr(&out);
    let goal = message
        .find("objective.goal")
        .expect("the goal is reported");
    let parallel = message
        .find("parallel_trial_count")
        .expect("the count is reported");
    assert!(goal < parallel, "{message}");
}

#[test]
fn a_missing_study_file_is_bad_input() {
    let scratch = Scratch::new();
    let out = scratch.hptune(&["run", "nowhere.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("nowhere.yaml: cannot read the study file"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_study_named_as_a_path_out_of_the_scratch_directory_is_refused_and_writes_nothing() {
    let scratch = Scratch::new();
    let outside = scratch.dir.path().parent().unwrap();
    let escape = outside.join(format!("hptune-escape-{}", std::process::id()));
    // From the scratch directory, hptune-logs/../../NAME is NAME beside the scratch directory.
    let relative = format!("../../{}", escape.file_name().unwrap().to_str().unwrap());
    for name in [relative.as_str(), escape.to_str().unwrap()] {
        let text = GOOD.replacen("name: bad", &format!("name: {name}"), 1);
        let path = scratch.study("study.yaml", &text);
        let out = scratch.hptune(&["run", path.to_str().unwrap()]);
        let escaped = escape.exists();
        let _ = std::fs::remove_dir_all(&escape);
        assert!(
            !escaped,
            "{name}: the workers' files were written outside the scratch directory"
        );
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("name: '{name}' is not a valid study name")),
            "{}",
            stderr(&out)
        );
        let left: Vec<_> = std::fs::read_dir(scratch.dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(left, ["study.yaml"], "only the study file is there");
    }
}

#[test]
fn a_study_recorded_under_a_name_now_refused_is_still_listed() {
    let scratch = Scratch::new();
    let path = scratch.study("study.yaml", GOOD);
    assert_success(&scratch.hptune(&["run", path.to_str().unwrap()]));
    let old = "an old/name";
    rename_study(&scratch, "bad", old);
    let studies = scratch.hptune(&["studies"]);
    assert_success(&studies);
    assert!(stdout(&studies).contains(old), "{}", stdout(&studies));
    assert_eq!(scratch.trials(old).len(), 3);
    assert_success(&scratch.hptune(&["best", old]));
    // Only running it again is refused.
    let text = GOOD.replacen("name: bad", &format!("name: {old}"), 1);
    let path = scratch.study("study.yaml", &text);
    let out = scratch.hptune(&["run", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(scratch.trials(old).len(), 3);
    // Listing by the study file reads only its name.
    assert_eq!(scratch.trials(path.to_str().unwrap()).len(), 3);
}

/// Renames a study in the scratch database, as a study recorded before names were checked.
fn rename_study(scratch: &Scratch, from: &str, to: &str) {
    let url = format!("sqlite://{}", scratch.path("hptune.db").display());
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        sqlx::any::install_default_drivers();
        let pool = sqlx::AnyPool::connect(&url).await.unwrap();
        sqlx::query("UPDATE studies SET name = $1 WHERE name = $2")
            .bind(to)
            .bind(from)
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    });
}
