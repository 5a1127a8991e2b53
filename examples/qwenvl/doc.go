// Package qwenvl runs Qwen2-VL and Qwen2.5-VL checkpoints on the SDK's tensor ops: Model is the
// vision tower (Vision: Conv3d patch embedding as one GEMM, 2D rotary embedding, LayerNorm +
// quick_gelu or RMSNorm + gated SiLU blocks, Qwen2.5-VL's window attention, the PatchMerger)
// and the Qwen2 language model of examples/hflm with M-RoPE, the features scattered over the
// placeholder tokens; forward, backward with the tower frozen or trained, cached generation,
// a tprl/loop Policy whose perturbed pass re-scores the sampled text with perturbed pixels,
// LoRA on the language model and the tower where PEFT would put it (AddLoRA, SaveLoRA,
// LoadLoRA, MergeLoRA, Base), and checkpoints in either weight-name layout (OpenCheckpoint,
// RandomCheckpoint, Save). LoadOn puts the model on any tensor.Backend (a CUDA device: the
// tower, the feature scatter and the language model run there as SDK ops; DeviceTraining
// trains it there). The goldens come from scripts/qwen2vl_torch_twin.py; docs/qwen2vl.md
// describes it.
//
// The input side matches Hugging Face's slow Qwen2VLImageProcessor and get_rope_index exactly:
//
//   - ProcessorConfig reads preprocessor_config.json (min_pixels/max_pixels, patch_size,
//     temporal_patch_size, merge_size, image_mean/image_std, the do_* switches, rescale_factor);
//   - SmartResize picks the resized height and width (multiples of patch_size·merge_size,
//     min_pixels ≤ h·w ≤ max_pixels, halves rounded to even as Python's round);
//   - ResizeBicubic is Pillow's two-pass fixed-point resampler (Image.resize with BICUBIC), so
//     the resized uint8 image is byte-identical to the one Hugging Face feeds the model;
//   - Processor.Images and Processor.Video rescale, normalise and cut the frames into
//     pixel_values [grid_t·grid_h·grid_w, C·temporal_patch_size·patch²] in Hugging Face's
//     element order, with image_grid_thw;
//   - ExpandText and ExpandTokens expand each <|image_pad|> / <|video_pad|> by its grid
//     (grid_t·grid_h·grid_w / merge_size²), and RopeIndex gives the M-RoPE position ids
//     [3][batch][seq] and rope deltas of get_rope_index, left padding included; ParseVisionTokens
//     reads the token ids it needs from config.json.
//
// The goldens in testdata come from scripts/qwen2vl_preprocess_twin.py, a NumPy/PyTorch twin of
// Hugging Face's code run with Pillow; docs/qwen2vl-preprocess.md says what matches what.
//
// Preprocess and RunPreprocessCommand are the `hf preprocess` subcommand: image_grid_thw, the
// shape of pixel_values and its statistics as JSON.
package qwenvl
