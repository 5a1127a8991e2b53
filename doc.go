// Package mtrl is a Go SDK for token-level multimodal policy optimization: the reinforcement
// learning machinery that fine-tunes vision-language models so that training concentrates on
// the tokens that actually depend on the image (VPPO, "token perception" RL).
//
// The root package holds only documentation; the work is done by small packages that share one
// tensor type (package tensor) with a pure-Go CPU backend and an optional CUDA backend
// (package cuda, behind the cuda build tag). On amd64 the hot CPU loops run in AVX-512 or AVX2
// assembly chosen at start-up; -tags noasm forces the pure-Go reference kernels.
//
// # One VPPO training step and which package does what
//
//  1. Rollout: sample n responses per prompt from the policy. Score them (rewards).
//  2. Old log-probs: run the policy on the original image; tensor.LogProbEntropy turns logits
//     [B, T, V] into per-token log-probs and entropies [B, T] in one pass.
//  3. Perturbed log-probs: blacken random patches of each image (perturb, seeded by sample id)
//     and recompute the log-probs of the same responses.
//  4. Reference log-probs, when a KL term is on; divergence computes kl, abs, mse, low_var_kl
//     (k3), k2 and full KL, and the fixed/adaptive KL controllers.
//  5. Advantages: advantage.Compute with GAE, GRPO (and pass@k), RLOO, REINFORCE++, ReMax.
//  6. Token perception: divergence.PerceptionScore scores each token by how much its log-prob
//     moved when the image was perturbed; tprl keeps the top-p fraction per response (and
//     optionally the top-p by entropy), and rescales each response's advantage by its mean
//     score (trajectory advantage shaping).
//  7. PPO update: ppo computes the clipped policy loss (dual clip, clip-higher, GSPO, CISPO,
//     SAPO) restricted to the selected tokens, value and KL losses, entropy penalty, in the
//     chosen aggregation mode with global token scaling across micro-batches and devices, and
//     returns analytic gradients with respect to the log-probs; tensor.LogProbEntropyBackward
//     carries them back to the logits.
//
// tprl.UpdateConfig and tprl.Update run steps 6–7 for one mini-batch, micro-batch by
// micro-batch. examples/quickstart runs steps 2–7 on generated tensors and prints what each did;
// examples/trainer (the main command) trains a small vision-language policy with all of it.
//
// # Conventions
//
// Outputs come first in argument lists (dst-first). Every exported function validates its
// arguments once and returns errors that wrap tensor.ErrShape, ErrDType, ErrBackend, ErrParam
// or ErrNotFinite and name the op and the argument. Every random function takes an explicit
// seed. The reference semantics are those of the public VPPO implementation, checked against
// its test vectors (../shared/golden); deliberate deviations are documented where they occur.
package mtrl
