#!/usr/bin/env bash
# How much of a build each command reuses: on a clean clone of each revision given, with its
# own empty target folder, runs the commands of the README and the benchmarks in the order a
# newcomer does, and prints for each the wall time and the crates it compiled (again).
#
#     bench/one_build.sh REV [REV ...]     # e.g. bench/one_build.sh HEAD~3 HEAD
#
# Each revision builds from nothing (about 15-20 minutes on 2 cores); crates.io sources come
# from cargo's cache. The table goes to stdout, cargo's output to bench/results/one_build-*.log.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$root/bench/results"
steps=(
  "cargo build --workspace"
  "cargo build -p hptune"             # what `cargo run` builds
  "cargo build -p hptune-trainer"     # bench/trainer_quality.py
  "cargo test --workspace --no-run"
)
echo "| revision | command | wall s | crates compiled |"
echo "|---|---|---:|---:|"
for rev in "$@"; do
  commit=$(git -C "$root" rev-parse --short "$rev")
  work=$(mktemp -d)
  git clone -q "$root" "$work/hptune"
  git -C "$work/hptune" checkout -q "$commit"
  log="$root/bench/results/one_build-$commit.log"
  : >"$log"
  for step in "${steps[@]}"; do
    start=$(date +%s.%N)
    output=$(cd "$work/hptune" && CARGO_TARGET_DIR="$work/target" $step 2>&1)
    end=$(date +%s.%N)
    printf '$ %s\n%s\n' "$step" "$output" >>"$log"
    printf '| %s | `%s` | %.0f | %s |\n' "$commit" "$step" "$(echo "$end - $start" | bc)" \
      "$(grep -c '^ *Compiling ' <<<"$output" || true)"
  done
  rm -rf "$work"
done
