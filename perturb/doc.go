// Package perturb implements the image perturbations of VPPO's perception step: random patch
// blackening (the method's default), Gaussian noise, complete masking and Gaussian blur.
//
// Where it sits in a VPPO training step: after the rollout, each sample's image is perturbed and
// the policy is run again on the perturbed image to get aug log-probs [B, T]; the per-token
// perception score (divergence.PerceptionScore) between the original and perturbed log-probs
// then selects the image-dependent tokens (package tprl).
//
// Images are uint8 tensors [H, W, C] with C = 1, 3 or 4, or grayscale [H, W] (the layout of
// np.array(pil_image)); batches are [N, H, W, C] or [N, H, W]. FromImage / FromImageAs / ToImage
// convert to and from image.Image, and ApplyImage perturbs an image.Image directly.
//
// Every perturbation implements Perturbation (Apply for one image, ApplyBatch for a batch,
// parallel over images); Default and ParseKind pick one by the reference's name. Randomness comes
// only from rand.New(rand.NewPCG(seed, sampleID)) (math/rand/v2), so the perturbation of a sample
// depends only on (seed, sample id): not on batch order, batch size, device count or GOMAXPROCS.
// The deterministic cores PatchGrid + BlackenPatches and AddNoise replay recorded draws, which is
// how the golden vectors (numpy's legacy global RandomState) are matched exactly.
//
// Semantics (docs/semantics.md#image-perturbations):
//   - Patch blackening walks patches row-major (patch row outer, column inner), one uniform draw
//     per patch, and zeroes all channels of the patch when draw < prob; edge patches are
//     partial. Defaults: 14-pixel patches, probability 0.5.
//   - Gaussian noise: trunc(clip(float64(img) + noise, 0, 255)); the alpha channel of RGBA gets no
//     noise. Defaults: mean 0, std 189.
//   - Complete masking: fill with one value or one per element of the last axis (numpy
//     broadcasting: for grayscale [H, W] that axis is the width).
//   - Gaussian blur is an mtrl extension: the reference always raises NameError (it never
//     imports PIL.ImageFilter). Blur is a separable Gaussian with standard deviation Radius, like
//     PIL's GaussianBlur(radius) but exact rather than PIL's box approximation.
//
// Deviations: the random streams differ from numpy's (PCG instead of MT19937, Go's ziggurat
// normal instead of numpy's polar method), so seeded results are reproducible within mtrl but do
// not equal the reference's for the same seed; mask values outside [0, 255] are rejected
// (ErrParam) instead of numpy's overflow behaviour; NaN noise gives 0.
package perturb
