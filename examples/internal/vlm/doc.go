// Package vlm is the example trainer's policy: a small vision-language transformer written on
// CPU float32 tensors, with its own forward, backward and KV-cached sampling.
//
// # Architecture
//
// An image [H, W, C] uint8 is cut into non-overlapping PatchSize×PatchSize patches (raster
// order); each patch, flattened row-major with channels innermost and mapped from 0..255 to
// -1..1, goes through a linear embedding plus a learned position embedding and becomes one of
// NP = (ImageSize/PatchSize)² prefix tokens. Text tokens get a token embedding plus a learned
// position embedding (positions 0..MaxLen-1 count text only). The sequence of S = NP + L tokens
// goes through Layers pre-LayerNorm decoder blocks
//
//	x = x + Attn(LN1(x)) · Wo + bo
//	x = x + GELU(LN2(x) · W1 + b1) · W2 + b2
//
// with Heads-head self-attention under this mask: image tokens attend to all image tokens
// (bidirectionally, never to text), text token t attends to every image token and to text
// tokens 0..t. Image tokens therefore do not depend on the text, and right-padding a row does not
// change the logits before the padding. A final LayerNorm and a linear head give logits
// [B, L, V] for the text positions only; logits[b, t] predicts tokens[b, t+1].
//
// GELU is the sigmoid form x·σ(1.702x). LayerNorm uses ε = 1e-5. Linear weights are stored
// [in, out] (y = x·W + b).
//
// # Place in a VPPO step
//
// The trainer samples responses with Generate (prefill of image+prompt, then one token at a
// time reusing cached keys/values), recomputes per-token log-probabilities with Forward followed
// by tensor.LogProbEntropy, gets d loss / d logp from tprl, turns it into dlogits with
// tensor.LogProbEntropyBackward and calls Backward, which accumulates into Param.G for the
// optimizer. Forward with perturbed images gives the perception log-probabilities.
//
// # Numerics
//
// The kernels are generic over float32 and float64: the model runs in float32 (exp with
// hostops.Exp), and the tests check every gradient against central finite differences of the
// same code in float64, and the float32 results against the float64 ones. On amd64 with AVX2
// (not under the noasm tag) the model's float32 matrix products, attention, softmax and GELU use
// assembly kernels with fused multiply-adds (AVX-512 GEMM blocks where available); HostOps keeps
// the pure-Go reference kernels, which the CUDA op set reproduces bit for bit, and tests hold
// the SIMD kernels to them. All parameter-gradient reductions run in a fixed order, so results
// do not depend on GOMAXPROCS.
//
// # On a device
//
// UseOps moves a model onto an op set (CUDAOps, built with the cuda tag): weights and gradients
// live on its backend from then on, Forward, Backward and Generate run there (KV-cached, with
// the device sampler drawing the host's uniforms), and the host copy is synchronised only when
// it is read (Params, HostParams) or written (Params). DeviceParams hands the device tensors to
// an optimizer on the device; ForwardOnBackend leaves the logits there; Transfers counts the
// whole-model copies.
package vlm
