// Package vlm is the example trainer's policy: a small vision-language transformer on the SDK's
// tensor ops (tensor.LinearBias, LayerNorm, Attention, Embedding, Activate and their backwards),
// with its own forward, backward and KV-cached sampling, on the CPU or a CUDA device.
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
// GELU is the sigmoid form x·σ(1.702x) (tensor.QuickGELU). LayerNorm uses ε = 1e-5. Linear
// weights are stored [out, in] (y = x·Wᵀ + b, a Hugging Face nn.Linear's layout); New draws them
// in [in, out] order and transposes them, so a seed gives the model it gave when they were
// stored [in, out].
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
// Every layer is an SDK op on float32 tensors (so the CPU's vector GEMM, the flash-style
// attention and the CUDA backend's kernels serve the model as they serve any other). The
// model's mask — image tokens see the image, text token t the image and text 0..t — is two
// attention calls with cu_seqlens over the same keys (net.go); no attention-probability matrix
// exists, and the attention statistics of ResponseAttention come from log-sum-exp differences.
// The tests hold the float32 model to a float64 reference of the same model (ref_test.go: plain
// loops, the probability matrix, a hand-written backward), whose gradients are checked against
// central finite differences and against gorgonia's autodiff. Results do not depend on
// GOMAXPROCS.
//
// # On a device
//
// UseOps moves a model onto an op set (CUDAOps, built with the cuda tag): weights and gradients
// live on its backend from then on, Forward, Backward and Generate run there (the same op
// sequence on the cuda backend, KV-cached, with the device sampler drawing the host's uniforms),
// and the host copy is synchronised only when it is read (Params, HostParams) or written
// (Params). DeviceParams hands the device tensors to an optimizer on the device;
// ForwardOnBackend leaves the logits there; Transfers counts the whole-model copies.
package vlm
