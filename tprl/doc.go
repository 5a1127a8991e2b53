// Package tprl implements token-perception RL (TPRL), the token-level part of VPPO: token
// gradient filtering by entropy and by perception score, and trajectory advantage shaping.
//
// # Where it sits in a VPPO step
//
// After rollout, rewards, advantages and the old log-probs have been computed, the trainer also
// scores the sampled responses with a perturbed (patch-blackened) image, giving aug log-probs.
// Before the PPO update of each mini-batch, for each micro-batch:
//
//  1. EntropyMask keeps, per response, the top-p fraction of valid tokens with the largest
//     policy entropy (docs/semantics.md#entropy-mask).
//  2. PerceptionMask keeps the top-p fraction with the largest perception score
//     low_var_kl = clamp(exp(d)-d-1, 0, 10), d = clamp(aug-old, -20, 20)
//     (docs/semantics.md#perception-mask) — the tokens whose log-prob depends most on the image.
//  3. UnionMask ORs the two when both are on (docs/semantics.md#combined-mask); the result is the
//     loss_token_mask of the policy loss (package ppo).
//  4. Trajectory shaping (ShapeAdvantages, ShapeBatch) rescales each response's advantages by a
//     factor that grows with its mean perception score (docs/semantics.md#advantage-shaping).
//
// Config.Apply does all of this from a Config with the seeds' YAML keys. RandomMask (not in the
// reference) is the perception mask's control: as many tokens per response, chosen uniformly at
// random and seeded per (seed, step, row), to tell training on fewer tokens from training on the
// right ones (Config.EnableRandomFiltering).
//
// UpdateConfig and Update go one step further and run the reference's whole actor update
// (update_policy, docs/semantics.md#policy-update) for one mini-batch: Prepare computes what the
// micro-batches share (the global token count, the shaping statistics); MicroBatch then takes the
// current policy's log-probs (and entropies) of its rows, applies the masks and shaping, adds the
// policy loss (package ppo), the optional KL loss and entropy penalty, scales by
// sum(m_micro) * WorldSize / GlobalTokens, and writes d loss / d log-probs. The trainer carries
// that gradient to the logits with tensor.LogProbEntropyBackward.
//
// # Shapes
//
// Per-token tensors are float32 [B, T] (B responses, T response tokens), masks are float32 0/1
// [B, T], the per-row counts k are int32 [B], and per-response scores and factors float32 [B].
//
// # Numerics and deviations from the reference
//
//   - k_i = ceil(float32(float32(n_i) * float32(p))) in float32, as the reference (tensor.TopPCount).
//   - Ties in the top-p selection go to the lower token index; NaN ranks above every number. The
//     reference's order among ties is unspecified (torch.sort). Selection uses an O(T) radix
//     selection per row with exactly the result of a stable descending sort.
//   - Padded positions are never selected and both masks are subsets of the response mask; the
//     reference does not intersect the entropy mask, which makes no difference for p ≤ 1.
//   - Metric means are accumulated in float64 and rounded to float32; the reference sums in
//     float32. Metric names and when they are present follow the reference exactly.
//   - Shaping: by default (GlobalScope) gmin, gmax and mu are taken over the whole mini-batch —
//     or, through ShapingStats, over every device — so the factors do not depend on the
//     micro-batch split or the number of devices, and they average to ≈1 over the valid rows of
//     the mini-batch. PerMicroBatchScope reproduces the reference: mu per micro-batch, range per
//     device mini-batch (its all_reduce is commented out). The target_max formula
//     smin + reciprocal(mu + 1e-8)*(1 - smin) is evaluated in float32 as torch does.
//   - Config.Apply shapes whenever EnableTrajectoryReweighting is set; the reference does so only
//     when perception filtering is on too (Config.ShapingRequiresPerception reproduces that).
//
// Inputs are not checked for NaN/Inf: NaN scores propagate into the metrics (and a NaN
// sensitivity score disables shaping, as torch.quantile gives NaN); use tensor.CheckFinite
// for an explicit check.
package tprl
