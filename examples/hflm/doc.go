// Package hflm runs Hugging Face's Qwen2/Qwen2.5 and Llama causal language models (the
// checkpoints examples/hfmodel reads) on the SDK's transformer ops: tensor.Embedding, RMSNorm,
// RoPE (rope_theta, rope_scaling linear and llama3), grouped-query Attention with q/k/v biases,
// SwiGLU, Linear on weights packed once at load, and the fused LM head.
//
//   - Load converts a checkpoint to float32 (bfloat16 and float16 widen exactly) and packs it.
//   - Logits is the full forward of one sequence: next-token logits [T, V].
//   - Score computes completions' per-token log-probs and entropies through the fused LM head
//     (never the [tokens, V] logits); with train, Scores.Backward accumulates every parameter's
//     gradient.
//   - Generate decodes a batch with a key/value cache: greedy, or temperature with top-k and
//     top-p from one random source per row, each row stopping at its own stop token.
//   - Policy makes a model a tprl/loop policy; Model.Training gives the loop its optimizer
//     (AdamW that repacks the weights after each step) and gradients.
//   - AddLoRA trains PEFT-style adapters on a frozen base; Base is the model without them
//     (the reference, no copy); SaveLoRA/LoadLoRA read and write PEFT's files; Checkpoint
//     exports the weights, adapters merged.
//
// LoadOn puts the model on any tensor.Backend (a CUDA device: weights, activations, caches,
// gradients and DeviceTraining's optimizer live there; docs/qwen2.md, "On a CUDA device").
// With data-parallel ranks, one device each, the SDK's loop.DeviceReduce sums the gradients
// there through a collective.Tensors (NCCL) and loop.DeviceShardedAdamW shards AdamW's state
// (ZeRO-1/2), with the model's Repack as their Stepped hook.
//
// Everything computes in float32 on the model's backend, sequences packed end to end without
// padding, unless SetMixedPrecision selects bf16 mixed precision (on the CPU: bfloat16 weights
// and activations over float32 masters, gradients and optimizer), SetCheckpointing recomputes
// each decoder layer's activations in the backward, or Policy.Padded pads the rows
// (docs/2026-11-memory.md measures each). A Model is not safe for concurrent use. docs/qwen2.md says how it is checked
// against PyTorch.
package hflm
