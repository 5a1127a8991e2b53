// Package cuda is a tensor.Backend on NVIDIA GPUs, through the CUDA driver API
// (gorgonia.org/cu), with device kernels for the fused op families of mtrl.
//
// # Build tag
//
// Everything that touches CUDA is behind the `cuda` build tag. Without it the package still
// compiles, New returns ErrNotCompiled, and `go build ./...` / `go test ./...` never need a GPU,
// a driver or nvcc.
//
// gorgonia.org/cu calls cuInit in its package init and exits the process (os.Exit(1), after
// printing a message) when no driver or GPU is present. A binary built with `-tags cuda` —
// including a test binary — is therefore for GPU machines only: it cannot even start elsewhere,
// so "no device" cannot be detected and skipped from inside it. Such binaries link only
// libcuda.so.1, so `go test -c -tags cuda` on a machine with the toolkit (for the libcuda stub)
// produces a test binary that runs on a GPU machine with a driver but no Go (scripts/gpu-check).
//
// Without a GPU, scripts/cuda-emu runs this package and its tests unchanged on internal/cuemu,
// a CPU emulation of the driver calls used here and of the CUDA execution model the kernels use
// (README "CUDA" lists what that verifies and what it cannot).
//
// # Where it sits
//
// A VPPO step runs the policy forward, then tensor.LogProbEntropy on logits [B, T, V], the
// perception score and top-p masks on [B, T], advantages, and the PPO loss with its gradient.
// With the tensors on a *cuda.Backend (tensor.To(backend, t)), each validated entry point finds
// the backend's kernel with tensor.KernelOf and runs it on the device. The kernels sit behind
// Backend.Kernels, not on Backend itself, so its method set holds no unvalidated ops. Ops
// without a kernel here stage their tensors through host memory (tensor.OnHost) and run the
// pure-Go kernel, so everything works, only slower.
//
// Kernels implemented (cuda/kernels/*.cu, committed PTX for compute_80, loaded with go:embed):
//
//   - tensor.LogProbEntropyKernel: fused log-prob + entropy forward (fp32 and bf16 logits, one
//     read of the logits, online softmax, rows split across blocks when there are few rows)
//     and backward (dlogits fp32 or bf16 from fp32 or bf16 logits);
//   - tensor.MaskedReduceKernel (MaskedSum, so MaskedMean) and tensor.MaskedStatsKernel
//     (MaskedMeanRows one block per row; MaskedVar and MaskedWhiten as fixed-split float64
//     passes, the scalars finished on the host as internal/hostops does);
//   - tensor.TopPKernel (per-row radix selection, stable ties, NaN first);
//   - divergence.PenaltyKernel, PenaltyBackwardKernel (every kind, full included),
//     PerceptionScoreKernel, RewardsKernel;
//   - ppo.PolicyLossKernel (every loss type and aggregation mode, token mask, Scale and
//     Accumulate, the metrics), ppo.ValueLossKernel, ppo.AverageLossKernel: per-row mask sums
//     on the device, the aggregation weights (B floats) computed on the host and uploaded, one
//     block per row for the loss, gradient and float64 metric sums, rows combined in order on
//     the host (two synchronisations per call); ppo.GradKernel (KLLoss's scaled weights and
//     accumulated gradient, EntropyPenalty's gradient, one float32 operation per element);
//   - advantage.GAEKernel and ReinforcePlusPlusKernel (the reverse recurrence one thread per
//     row, then the masked whitening on the device), ReMaxKernel, GroupKernel (GRPO, pass@k,
//     RLOO: row scores on the device, the group statistics on the host from the downloaded
//     scores and ids, the per-row advantages broadcast under the mask on the device);
//   - tprl.SelectionStatsKernel (EntropyMask, PerceptionMask: the TopPMask selection, then
//     per-row counts, float64 sums and thresholds, combined in row order on the host);
//     tprl.UnionKernel (UnionMask: the union and its per-row statistics); tprl.ShapingKernel
//     (trajectory shaping: per-row masked sums come down, the host computes the statistics and
//     factors with tprl's own plan, the B factors go up and the rows are scaled on the device);
//   - perturb.BlackenKernel (Blackening.ApplyBatch: grids drawn on the host from the seeded
//     generators, one pass on the device);
//   - the transformer op families of package tensor (docs/ops.md, "CUDA"): MatMul and Linear
//     through cuBLAS (cublasGemmEx, cublasGemmStridedBatchedEx; float32 or bfloat16 inputs,
//     float32 compute; bound in cublas.go), RMSNorm, LayerNorm, RoPE (mrope sections),
//     activations, SwiGLU, embedding gather and scatter-add, AdamW and the gradient-norm
//     reductions (kernels/nn.cu), flash-style attention forward, decode and backward
//     (kernels/attention.cu), and the fused LM head (tensor.LMHeadLogProbs and its backward:
//     cuBLAS logits one vocabulary chunk at a time, folded per row by kernels in
//     kernels/logprob.cu; never [N, V]; scratch [N, chunk] float32 per call, chunk 8192,
//     narrower above 8192 rows so that it stays within 256 MiB).
//
// Not on the device yet (host staging through tensor.OnHost): ResponseMask (package tensor
// declares no kernel interface for it), the single-image perturbations and the other
// perturbation kinds (noise, masking, blur).
//
// The loss and advantage kernels use ports of internal/hostops' float32 exp (hostexp.cuh) and
// mirror the pure-Go kernels' float32 order; every sum is float64 on both sides (block trees
// here, index order there), so results agree with the CPU backend's pure-Go kernels to float64
// rounding before the final float32 rounding (in practice bitwise or within an ulp). The vector
// (SIMD) host kernels differ from both by an ulp or two (their vector exp and float32 lane
// sums), which the cross-checks avoid by comparing with the pure-Go kernels
// (internal/dispatch.ForceGo).
//
// # Threads, streams, errors
//
// Each Backend owns one CUDA context, created and used by one goroutine locked to an OS thread;
// every driver call is funnelled through it, one closure per op (a few cgo calls per op). Work
// is queued on one stream in order; Download and Sync wait for it. Close releases the context.
// Driver failures, out-of-memory included, come back as errors wrapping tensor.ErrDevice that
// name the driver call and the kernel; the process never crashes on them.
//
// # Numerics
//
// Accumulation is fp32 (fp64 for masked sums and the full KL, as the host kernels), kernels
// are compiled without --use_fast_math and with -fmad=false (no contraction into fused
// multiply-adds, so elementwise results follow the reference's float32 order), and reductions
// use fixed-order trees (no floating-point atomics): two runs on the same inputs give the same
// bits. In the log-prob and divergence kernels expf differs from the host's polynomial exp by an
// ulp or two, so results agree with the CPU backend to tolerance, not bitwise.
package cuda
