// Package ppo implements the losses of the PPO update of a VPPO / TPRL training step, each with
// its analytic gradient: the clipped policy loss (PPO with clip-higher and dual clip, GSPO,
// GSPO-token, CISPO, SAPO), the clipped value loss, the KL loss against a reference policy, the
// entropy penalty, the loss aggregation modes, and the global token scaling used when a
// mini-batch is split into micro-batches and across data-parallel ranks.
//
// # Where it sits
//
// In a VPPO step (docs/semantics.md#policy-update) the rollout produces old log-probs; advantage estimation
// (package advantage) gives A; package tprl builds the loss token mask (the top-p perception /
// entropy selection) and shapes the advantages. For each micro-batch the trainer runs the policy
// forward to get log-probs lp [B, T], then
//
//	s, _ := ppo.TokenScale(mask, globalTokens, worldSize)  // docs/semantics.md#token-scaling
//	g := ppo.Grad{Dst: grad, Scale: s, Accumulate: true}    // grad zeroed beforehand
//	pg, _ := ppo.PolicyLoss(g, ppo.PolicyInputs{...}, cfg)
//	kl, _ := ppo.KLLoss(g, lp, refLP, mask, klCfg)          // if use_kl_loss
//	ent, _ := ppo.EntropyPenalty(g, lp, mask, entCfg)       // if use_entropy_penalty
//
// and backpropagates grad (d loss / d lp, [B, T]) through the log-softmax of the model. The loss
// of the micro-batch is pg.Loss + kl.Loss + ent; pg.PGLoss and the Metrics maps are what the
// reference logs.
//
// # Shapes and dtypes
//
// Every tensor is float32 [B, T] (B responses, T response tokens) on one backend, except the
// full-distribution KL (divergence.Full) whose log-probs and gradient are [B, T, V]. Masks are
// float32 0/1 (fractional weights work too). The gradient destination, scale and
// accumulation come first in every loss call (Grad); a nil Grad.Dst computes the forward value
// only.
//
// # Numerics
//
// The kernels follow the reference's float32 arithmetic (docs/semantics.md#numerics): Python
// scalars are rounded to float32 where they meet tensors (clip bounds log(1-low), log(1+high) are
// computed in float64 then rounded), masked_mean is sum/(count + 1e-8) in float32, sums are
// accumulated in float64 per row and combined in row order, so results do not depend on GOMAXPROCS.
// Gradients are analytic, not autograd: a clamp passes the gradient with both ends inclusive and a
// tie in max/min splits it half and half, as torch does. In float32 the ratio exp is
// hostops.ExpNonPos (with a reciprocal for positive log ratios, about 3 ulp) and SAPO's sigmoid
// uses hostops.Exp. Every kernel is generic over float32/float64; the tests check each gradient
// against central finite differences in float64.
//
// On amd64 the Vanilla (dual-clip) loss in token mode runs in an AVX-512 or AVX2+FMA kernel
// generated with avo (internal/asmgen; a test fails if policy_amd64.s is stale): forward,
// gradient stored or accumulated, with or without a token mask. Its per-row sums are float32
// lane partials (at most 512 tokens each) combined in float64 in lane order, about 4e-6 relative
// at worst; results are bit-identical across runs and GOMAXPROCS. Other loss types, float64 and
// clip bounds beyond ±20 take the generic Go path; -tags noasm forces it everywhere.
//
// # Deviations from the reference
//
//   - GSPO broadcasts the sequence log-ratio per row (upstream EasyR1's fix,
//     docs/semantics.md#gspo-sequence-ratio-broadcast); the VPPO fork broadcasts it along the wrong
//     axis for B > 1.
//   - SAPO is upstream EasyR1's (the fork silently falls back to the PPO loss). Combined with a
//     token mask, the per-token loss is multiplied by the mask as for the other loss types.
//   - Masked-out tokens (m == 0) are skipped: their gradient is exactly 0 and NaN/Inf there do not
//     propagate (torch would compute NaN*0 = NaN). Non-finite values at valid tokens propagate;
//     set CheckFinite in the config to reject them with ErrNotFinite instead.
//   - The Seq and SeqMeanTokenSum means over zero rows return 0 (torch: NaN).
//   - The aggregation modes add verl's names; seq-mean-token-sum-norm divides the batch's token
//     sum by a constant Agg.Horizon, as verl does (not by B; see AggMode).
package ppo
