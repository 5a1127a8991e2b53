#!/usr/bin/env bash
# Times the example trainer's default configuration, shortened, on the three CPU paths of this
# machine, interleaved: the default build (AVX-512 where a kernel has it), the same binary with
# GODEBUG=cpu.avx512f=off (golang.org/x/sys/cpu then reports no AVX-512: the AVX2 kernels run),
# and a -tags noasm build (pure Go).
#
#   scripts/trainer-cpus.sh [OUT] [REPS] [key=value ...]
#
# Prints one line per run: warm-start seconds per 1000 steps and RL seconds per step (the RL time
# includes the final validation). Extra key=value arguments go to every run; set the step counts
# with SFT and STEPS (environment), not with training.sft_steps / training.steps.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/cpus}
REPS=${2:-1}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] && shift
mkdir -p "$OUT"
go build -o "$OUT/trainer" ./examples/trainer
go build -tags noasm -o "$OUT/trainer-noasm" ./examples/trainer
SFT=${SFT:-200} STEPS=${STEPS:-10} # warm-start and RL steps per run
for rep in $(seq "$REPS"); do
  for v in avx512 avx2 noasm; do
    bin="$OUT/trainer"; envs=()
    [ "$v" = avx2 ] && envs=(GODEBUG=cpu.avx512f=off)
    [ "$v" = noasm ] && bin="$OUT/trainer-noasm"
    d="$OUT/${v}_$rep"; rm -rf "$d"
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    env "${envs[@]}" "$bin" training.run_dir="$d" training.progress=false training.save_freq=0 \
      training.sft_steps=$SFT training.steps=$STEPS training.val_freq=0 training.val_before_train=false \
      "$@" > "$d.log" 2>&1
    python3 - "$d/summary.json" "$v" "$rep" "$load" "$SFT" "$STEPS" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
v, rep, load, sft, steps = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
print(f"{v:7s} rep {rep}  load [{load}]  warm start {d['warm_start_s'] / sft * 1000:.1f} s/1000 steps  RL {d['rl_s'] / steps:.3f} s/step")
PY
  done
done
