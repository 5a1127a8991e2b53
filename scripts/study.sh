#!/usr/bin/env bash
# The VPPO ablation study in one command:
#
#   scripts/study.sh [OUT] [key=value ...]
#
# Arms: GRPO; GRPO+TGF (the perception token mask only); GRPO+TAS (trajectory advantage shaping
# only); full VPPO (both); GRPO with the high-entropy token mask (the 80/20 rule) for contrast.
# Seeds: $SEEDS (default "1 2 3 4 5"). Each seed's warm start runs once (in the grpo arm) and every
# other arm of that seed starts from its post-warm-start checkpoint (global_step_0), so the arms of
# a seed share the warm start, the data order and the budget. Extra key=value arguments go to
# every run (e.g. training.steps=100 dataset.ordered_options=true). At the end the trainer's -study
# mode prints the table (mean ± s.e. at fixed steps, steps to the warm start + $DELTA, a paired
# t-test of each arm against GRPO across seeds, perception-mask precision/recall early and late)
# into OUT/study.md and plots mean ± s.e. per arm into OUT/study.png.
# Runs are sequential; on 2 cores budget about (warm start + RL) x 5 arms x 5 seeds.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/study}
[ $# -gt 0 ] && shift
SEEDS=${SEEDS:-1 2 3 4 5}
DELTA=${DELTA:-0.05}
mkdir -p "$OUT"
go build -o "$OUT/trainer" ./examples/trainer
declare -A ARM=(
  [grpo]="optimization.enable_perception_filtering=false optimization.enable_trajectory_reweighting=false"
  [grpo_tgf]="optimization.enable_perception_filtering=true optimization.enable_trajectory_reweighting=false"
  [grpo_tas]="optimization.enable_perception_filtering=false optimization.enable_trajectory_reweighting=true"
  [vppo]="optimization.enable_perception_filtering=true optimization.enable_trajectory_reweighting=true"
  [grpo_entropy]="optimization.enable_perception_filtering=false optimization.enable_trajectory_reweighting=false optimization.enable_entropy_filtering=true"
)
for seed in $SEEDS; do
  for arm in grpo grpo_tgf grpo_tas vppo grpo_entropy; do
    dir="$OUT/$arm/s$seed"
    if [ -f "$dir/summary.json" ]; then echo "skip $dir (done)"; continue; fi
    rm -rf "$dir"; mkdir -p "$OUT/$arm"
    start=()
    if [ "$arm" != grpo ]; then
      start=(training.load_checkpoint_path="$OUT/grpo/s$seed/checkpoints/global_step_0")
    fi
    echo "== $arm seed $seed"
    # shellcheck disable=SC2086
    "$OUT/trainer" training.seed="$seed" worker.actor.model.seed="$seed" training.run_dir="$dir" \
      training.progress=false "${start[@]}" ${ARM[$arm]} "$@" > "$dir.log" 2>&1 || { tail -5 "$dir.log"; exit 1; }
    grep -h "val/accuracy" "$dir.log" | head -1 || true
  done
done
"$OUT/trainer" -study "$OUT" -o "$OUT/study.png" -study-delta "$DELTA" | tee "$OUT/study.md"
