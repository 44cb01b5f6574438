#!/usr/bin/env bash
# Throughput of hptune's Slurm executor against the floor of any orchestrator on the same
# cluster: TRIALS short jobs (a worker that prints its loss at once), PARALLEL at a time,
#   - hptune: a study of TRIALS trials, `executor: {kind: slurm}` with its defaults, SQLite;
#   - the floor: a shell loop submitting the same jobs with `sbatch --wait`
#     (`xargs -P PARALLEL`), each job's output to a file of its own.
# Prints one table: jobs/s of each and hptune's ratio to the floor.
#
#   bench/slurm.sh [TRIALS (200)] [PARALLEL (3)]
#
# Needs a Slurm cluster whose filesystem this directory is on (scripts/start-slurm.sh starts
# one here) and the hptune binary in $HPTUNE (default target/release/hptune).
set -euo pipefail

trials=${1:-200}
parallel=${2:-3}
hptune=$(realpath "${HPTUNE:-target/release/hptune}")
work=$(mktemp -d "$PWD/bench-slurm.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

cat >study.yaml <<EOF
name: bench-slurm
objective: {metric: loss, goal: minimize}
parameters:
  - {id: x, type: double, min: 0.0, max: 1.0}
algorithm: random
max_trial_count: $trials
parallel_trial_count: $parallel
seed: 1
trial:
  command: [sh, -c, 'echo "loss=\${1#--x=}"', worker]
  executor: {kind: slurm}
EOF

now() { date +%s.%N; }

start=$(now)
"$hptune" run study.yaml --storage "sqlite://$work/hptune.db" >/dev/null 2>&1
hptune_seconds=$(echo "$(now) - $start" | bc)
succeeded=$("$hptune" trials bench-slurm --storage "sqlite://$work/hptune.db" --state succeeded \
  --format csv | tail -n +2 | wc -l)
[ "$succeeded" -eq "$trials" ] || { echo "error: $succeeded of $trials trials succeeded" >&2; exit 1; }

mkdir floor
start=$(now)
seq "$trials" | xargs -P "$parallel" -I{} \
  sbatch --wait --quiet --output="floor/{}.log" --wrap 'echo loss=0.{}'
floor_seconds=$(echo "$(now) - $start" | bc)
finished=$(grep -l '^loss=' floor/*.log | wc -l)
[ "$finished" -eq "$trials" ] || { echo "error: $finished of $trials floor jobs reported" >&2; exit 1; }

rate() { echo "scale=2; $trials / $1" | bc; }
printf '| %s jobs, %s at a time | jobs/s | seconds |\n|---|---|---|\n' "$trials" "$parallel"
printf '| hptune, kind: slurm | %s | %.1f |\n' "$(rate "$hptune_seconds")" "$hptune_seconds"
printf '| sbatch --wait loop (the floor) | %s | %.1f |\n' "$(rate "$floor_seconds")" "$floor_seconds"
printf '| hptune / floor | **%sx** | |\n' "$(echo "scale=2; $floor_seconds / $hptune_seconds" | bc)"
