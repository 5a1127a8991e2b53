// Package divergence computes the KL penalties, the perception score and the KL-coefficient
// controllers of a VPPO / TPRL training step.
//
// Where it sits in a step: after the rollout, the trainer has per-token log-probs of the
// sampled responses under the current policy (logp), the reference policy (ref), and the policy
// shown a perturbed image (aug). The package turns them into
//
//   - Penalty: the per-token KL penalty of compute_kl, [B, T] (kl/k1, abs, mse/k2,
//     low_var_kl/k3, or full over [B, T, V] log-distributions), used as an in-reward penalty
//     (Rewards) or as a KL loss term, with PenaltyBackward carrying d loss / d penalty to the
//     log-probs (dlogp = DPenalty · d penalty / d logp);
//   - Rewards: token rewards scores - (logp - ref) * klRatio, [B, T];
//   - PerceptionScore: the VPPO token perception score clamp(exp(d) - d - 1, 0, 10) with
//     d = clamp(aug - old, -20, 20), [B, T], from which package tprl picks the top-p tokens;
//   - Controller (Fixed, Adaptive): the KL coefficient, updated once per step.
//
// Shapes use [B, T] for (responses, response tokens) and [B, T, V] for full distributions. All
// tensors are float32; every entry point validates shapes, dtypes and backends and returns errors
// wrapping tensor.ErrShape, ErrDType, ErrBackend or ErrParam naming the op and argument. A backend
// may provide the optional PenaltyKernel, PenaltyBackwardKernel, PerceptionScoreKernel and
// RewardsKernel interfaces; otherwise the pure-Go kernels run on host memory (zero-copy on the CPU
// backend), parallel over elements with a chunking that does not depend on GOMAXPROCS.
//
// Numerics: values are computed in float32 like the reference (docs/semantics.md#numerics).
// exp uses a fast float32 exp accurate to about 2 ulp, so low_var_kl and the perception score
// agree with torch to about 1e-7 absolute. Full sums over V in float64 and rounds once, which is
// at least as accurate as torch's float32 sum. Clamps pass NaN through (torch.clamp does) and
// pass the gradient when their input lies inside the bounds, ends inclusive. NaN and ±Inf inputs
// propagate; Full with a -Inf log-prob gives NaN, as the reference does. The KL controllers work
// in float64 exactly as the reference, with no floor on the coefficient.
//
// Performance: on amd64, LowVarKL (Penalty and PenaltyBackward) and PerceptionScore run in
// AVX-512 or AVX2+FMA kernels generated with avo (internal/asmgen; go generate ./divergence, and
// a test fails if penalty_amd64.s is stale), chosen at start-up; -tags noasm and other
// architectures use the pure-Go loops, which stay the reference. The vector exp has the same
// construction as the Go one (within about 2 ulp of it); clamp decisions and NaN positions are
// identical. Both paths are bit-identical across runs and GOMAXPROCS. The other kinds are scalar
// Go.
//
// Deviations from the reference: the adaptive controller rejects target == 0 at construction
// (ErrParam) where the reference raises ZeroDivisionError in its first update; Full accepts any
// leading shape and reduces the last axis (the reference does the same; no case passes [B, T]).
package divergence
