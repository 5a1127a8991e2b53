// Package advantage computes the advantage estimators of RL fine-tuning for language and
// vision-language models: GAE, GRPO, GRPO pass@k, RLOO, REINFORCE++ and ReMax, with the
// semantics and float32 numerics of the VPPO / EasyR1 reference (core_algos.py;
// docs/semantics.md#advantage-estimators).
//
// # Where it sits in a VPPO step
//
// rollout (n responses per prompt) → rewards → old log-probs (and values, for GAE) → advantages
// (this package) → token masks and trajectory shaping (package tprl) → PPO update (package ppo).
// The advantages it returns are per token; the group estimators broadcast one scalar per
// response over its valid tokens.
//
// # Shapes
//
// B responses of T response tokens. token_level_rewards, values and response_mask are float32
// [B, T]; the mask holds 0/1 (right padding and holes are 0). Group ids (the reference's uid
// "index") are int32 [B]: rows with the same id are responses to the same prompt, in any order
// and with any int32 values. ReMax's reward baselines are float32 [B]. Outputs adv and returns
// are float32 [B, T]. Compute (advantages) and ComputeWithReturns (advantages and returns)
// dispatch on a Config whose Estimator names the reference's estimator; each Estimator constant
// links its semantics in docs/semantics.md.
//
//	Estimator          inputs                    adv                              returns
//	GAE                rewards, values, mask     whiten(raw GAE)                  raw + values
//	GRPO               rewards, mask, index      (s-mean)/(std+eps)*m             = adv
//	GRPOPassK          rewards, mask, index      arg-max row (r1-r2)/(std+eps)*m  = adv
//	RLOO               rewards, mask, index      (s - leave-one-out mean)*m       = adv
//	ReinforcePlusPlus  rewards, mask             whiten(discounted return)        discounted return
//	ReMax              rewards, mask, baselines  (s - baseline)*m                 masked reward-to-go
//
// # Bad input and edge cases
//
// Shapes, dtypes, backends and parameters are validated once (errors wrap tensor.ErrShape,
// ErrDType, ErrBackend or ErrParam and name the op and argument). A GRPO / pass@k / RLOO group
// of one response is an ErrParam naming "index" and the group id. An empty batch [0, T] is valid
// and writes nothing; with T = 0 there is nothing to write, but the group estimators still check
// the groups. NaN and ±Inf propagate; use tensor.CheckFinite on the inputs for an opt-in check.
// Outputs must not alias the inputs or each other.
//
// # Numerics and deviations from the reference
//
//   - Everything is float32 in the reference's order. Python scalars are rounded to float32 when
//     they meet tensors: GAE uses fl32(gamma*lam) (product in float64 first) and fl32(gamma);
//     GRPO uses fl32(eps). Explicit conversions keep Go from fusing multiply-adds.
//   - Sums over a row (scores, ReMax's reverse cumsum) and the group statistics are accumulated
//     in float64 and rounded to float32. torch sums rows in float32 and computes std in float64,
//     so results agree to an ulp or two; a group of equal scores gets exactly 0, never NaN.
//   - Whitening (GAE, REINFORCE++) is the reference's masked_whiten with one mean and unbiased
//     variance over the whole batch; padded positions are whitened too and not re-masked.
//   - GAE is the per-row masked recurrence the vectors encode (docs/semantics.md#batched-gae): the
//     fork itself only runs for B = 1 with the last token valid.
//   - GRPOPassK follows upstream EasyR1 (non-max rows 0), not the fork
//     (docs/semantics.md#passk-in-place-write).
//   - ReMax broadcasts the per-response score along rows (docs/semantics.md#remax-score-broadcast),
//     not along T.
//   - Extensions, off by default: GRPOOptions.StdFloor (std = max(std, floor)) and
//     GRPOOptions.NoStdNorm (Dr.GRPO: no division by the std).
//
// Kernels run on the host with zero copies for CPU tensors, parallel over rows with a fixed
// chunking (results do not depend on GOMAXPROCS); a backend may supply device kernels by
// implementing GAEKernel, GroupKernel, ReinforcePlusPlusKernel or ReMaxKernel.
package advantage
