// Package loop is the RL loop of token-perception policy optimization as a library: bring a
// policy, reward functions and prompts; the loop samples rollouts, scores them, computes the
// perception score, the advantages and the VPPO update, and steps the optimizer.
//
// The pieces are interfaces at the per-token log-prob boundary that tprl.Update works on:
//
//   - Policy: generation (the policy owns sampling and stopping), scoring rows with their own
//     or their perturbed inputs into log-probs and entropies [B, T], and a training forward
//     whose Backward takes d loss / d log-probs. FromLogits adapts a model that produces
//     [B, T, V] logits, through the fused tensor.LogProbEntropy and its backward.
//   - Reward: plain functions of the prompts and completions, weighted and summed, each
//     logged as reward/<name> (TRL's reward_funcs).
//   - Data: the prompts of each step (Epochs over a slice).
//   - Optional: a Reference scorer (the KL loss, or the divergence in the reward), a Critic
//     (GAE), an Optimizer (AdamW shipped) and Gradients (the micro-batch and rank sum), and a
//     collective.Comm for N data-parallel ranks. HostGradients sums in one device's order;
//     BucketedGradients reduce-scatters and all-gathers in buckets (ordered, or summing
//     micro-batches in place); NewShardedAdamW shards AdamW's moments over the ranks (ZeRO-1/2)
//     with its Gradients, and the loop steps it as a GroupOptimizer. A policy that implements
//     FinalGradients (reporting parameters its backward is done with) gets the bucketed
//     reduction run during the backward of each mini-batch's last micro-batch, with the same
//     bits as after it. A policy whose parameters live on a device (any tensor.Backend) trains
//     them there: DeviceAdamW (the SDK's tensor.AdamWStep) with DeviceGradients on one rank;
//     on N ranks DeviceReduce (ordered or bucketed, through a collective.Tensors: NCCL, or
//     collective.HostTensors) with DeviceShardedAdamW for ZeRO-1/2. Offload instead keeps any
//     of these in host memory (the float32 masters, the moments, the reduction): gradients
//     come down, the weights go up.
//
// Config is assembled from the library's own configurations: advantage.Config,
// tprl.UpdateConfig, perturb.Perturbation and divergence.ControllerConfig. Loop.Step returns the
// step's metrics under verl's and EasyR1's names and its per-token tensors; State and Restore
// resume a run exactly (with the policy's weights, the optimizer's moments and the data
// position, which their owners checkpoint).
//
// With a Comm, each rank samples and scores its share of the rows and the results are
// gathered; every statistic is computed on the whole batch on every rank, and the gradient sum
// runs in one fixed order (the default, and every ordered reduction), so N ranks reproduce one
// rank bit for bit.
package loop
