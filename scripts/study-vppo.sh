#!/usr/bin/env bash
# The VPPO study in one command (docs/2026-11-study-vppo.md):
#
#   scripts/study-vppo.sh [OUT]            # JOBS=2 runs two trainers at a time
#
# Six arms, one config file each in examples/trainer/study/ (GRPO; VPPO; the perception mask
# alone; trajectory shaping alone; the high-entropy mask; a random mask keeping as many tokens as
# the perception mask) on the reasoning-chain task, seeds $SEEDS (default 1..5). Each seed's warm
# start runs once, in the grpo arm; every other arm of that seed starts from its checkpoint
# (global_step_0), so the arms of a seed share warm start, data order and budget. At the end
# `trainer -study` writes OUT/study.md (accuracy at fixed steps, final/late/best accuracy, steps to
# the warm start + $DELTA, paired comparisons across seeds, perception-mask precision) and
# OUT/study.png; OUT/meta.txt records the commit, the CPU, the load and the wall time.
# A finished run (summary.json) is skipped, so an interrupted study resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/study-vppo}
SEEDS=${SEEDS:-1 2 3 4 5}
JOBS=${JOBS:-1}
DELTA=${DELTA:-0.05}
ARMS="vppo grpo_tgf grpo_tas grpo_entropy grpo_random" # besides grpo, which runs first
mkdir -p "$OUT"
export OUT
go build -o "$OUT/trainer" ./examples/trainer
start=$(date +%s)
{
  echo "commit $(git rev-parse HEAD) ($(git status --porcelain --untracked-files=no | wc -l) modified tracked files)"
  echo "cpu $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; jobs $JOBS; seeds $SEEDS"
  echo "load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$OUT/meta.txt"

one() { # ARM SEED
  local arm=$1 seed=$2 dir="$OUT/$1/s$2" from=()
  if [ -f "$dir/summary.json" ]; then echo "skip $dir (done)"; return; fi
  rm -rf "$dir"; mkdir -p "$OUT/$arm"
  [ "$arm" = grpo ] || from=(training.load_checkpoint_path="$OUT/grpo/s$seed/checkpoints/global_step_0")
  local t0=$SECONDS
  "$OUT/trainer" -config "examples/trainer/study/$arm.yaml" training.seed="$seed" worker.actor.model.seed="$seed" \
    training.run_dir="$dir" training.progress=false "${from[@]}" > "$dir.log" 2>&1 || { echo "FAILED $dir"; tail -5 "$dir.log"; return 1; }
  echo "$arm s$seed: $((SECONDS - t0)) s, $(grep 'val/accuracy' "$dir.log" | tail -1 | tr -s ' ')"
}
export -f one
# Warm starts first (the grpo arm of each seed), then the other arms from their checkpoints.
for s in $SEEDS; do echo "grpo $s"; done | xargs -P "$JOBS" -L 1 bash -c 'one "$@"' _
for s in $SEEDS; do for a in $ARMS; do echo "$a $s"; done; done | xargs -P "$JOBS" -L 1 bash -c 'one "$@"' _
"$OUT/trainer" -study "$OUT" -o "$OUT/study.png" -study-delta "$DELTA" > "$OUT/study.md"
{
  echo "load average at end $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "wall time $(($(date +%s) - start)) s"
} >> "$OUT/meta.txt"
cat "$OUT/study.md" "$OUT/meta.txt"
