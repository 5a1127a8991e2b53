package qwenvl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/mtrl-go/mtrl/tensor"
)

// ProcessorConfig is preprocessor_config.json of a Qwen2-VL or Qwen2.5-VL checkpoint.
// DefaultProcessorConfig holds Qwen2VLImageProcessor's defaults.
type ProcessorConfig struct {
	DoResize          bool
	Resample          int // PIL resampling filter; only 3 (BICUBIC) is implemented
	DoRescale         bool
	RescaleFactor     float64
	DoNormalize       bool
	ImageMean         [3]float64
	ImageStd          [3]float64
	DoConvertRGB      bool
	MinPixels         int
	MaxPixels         int
	PatchSize         int
	TemporalPatchSize int
	MergeSize         int
}

// PIL's resampling filter numbers (PIL.Image.Resampling).
const resampleBicubic = 3

// DefaultProcessorConfig returns Qwen2VLImageProcessor's defaults: bicubic resize to
// 56·56 ≤ h·w ≤ 28·28·1280 pixels, rescale by 1/255, CLIP mean and std, 14-pixel patches, two
// frames per temporal patch, 2×2 merge.
func DefaultProcessorConfig() ProcessorConfig {
	return ProcessorConfig{
		DoResize:          true,
		Resample:          resampleBicubic,
		DoRescale:         true,
		RescaleFactor:     1.0 / 255,
		DoNormalize:       true,
		ImageMean:         [3]float64{0.48145466, 0.4578275, 0.40821073},
		ImageStd:          [3]float64{0.26862954, 0.26130258, 0.27577711},
		DoConvertRGB:      true,
		MinPixels:         56 * 56,
		MaxPixels:         28 * 28 * 1280,
		PatchSize:         14,
		TemporalPatchSize: 2,
		MergeSize:         2,
	}
}

// Factor is the side every resized image is a multiple of: patch_size·merge_size (28).
func (c ProcessorConfig) Factor() int { return c.PatchSize * c.MergeSize }

// metadataKeys are keys of preprocessor_config.json that name classes and change nothing here.
var metadataKeys = map[string]bool{
	"image_processor_type": true, "processor_class": true, "feature_extractor_type": true,
	"auto_map": true, "_processor_class": true,
}

// ParseProcessorConfig reads the JSON of preprocessor_config.json over DefaultProcessorConfig.
// As Qwen2VLImageProcessor: size.shortest_edge / size.longest_edge give the pixel bounds and
// min_pixels / max_pixels, where present, override them. A key this package does not know is an
// error naming it, so that no setting is silently ignored.
func ParseProcessorConfig(data []byte) (ProcessorConfig, error) {
	const op = "qwenvl.ParseProcessorConfig"
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return ProcessorConfig{}, tensor.Errorf(tensor.ErrParam, op, "", "not a JSON object: %v", err)
	}
	c := DefaultProcessorConfig()
	var minPixels, maxPixels *int
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		v := raw[k]
		var err error
		switch k {
		case "do_resize":
			err = json.Unmarshal(v, &c.DoResize)
		case "resample":
			err = json.Unmarshal(v, &c.Resample)
		case "do_rescale":
			err = json.Unmarshal(v, &c.DoRescale)
		case "rescale_factor":
			err = json.Unmarshal(v, &c.RescaleFactor)
		case "do_normalize":
			err = json.Unmarshal(v, &c.DoNormalize)
		case "image_mean":
			c.ImageMean, err = parseTriple(v)
		case "image_std":
			c.ImageStd, err = parseTriple(v)
		case "do_convert_rgb":
			err = json.Unmarshal(v, &c.DoConvertRGB)
		case "min_pixels":
			minPixels = new(int)
			err = json.Unmarshal(v, minPixels)
		case "max_pixels":
			maxPixels = new(int)
			err = json.Unmarshal(v, maxPixels)
		case "size":
			var size map[string]int
			if err = json.Unmarshal(v, &size); err == nil {
				lo, okLo := size["shortest_edge"]
				hi, okHi := size["longest_edge"]
				if !okLo || !okHi || len(size) != 2 {
					err = fmt.Errorf("want exactly shortest_edge and longest_edge, got %s", v)
				}
				c.MinPixels, c.MaxPixels = lo, hi
			}
		case "patch_size":
			err = json.Unmarshal(v, &c.PatchSize)
		case "temporal_patch_size":
			err = json.Unmarshal(v, &c.TemporalPatchSize)
		case "merge_size":
			err = json.Unmarshal(v, &c.MergeSize)
		default:
			if !metadataKeys[k] {
				return ProcessorConfig{}, tensor.Errorf(tensor.ErrParam, op, k, "unsupported key")
			}
		}
		if err != nil {
			return ProcessorConfig{}, tensor.Errorf(tensor.ErrParam, op, k, "%v", err)
		}
	}
	if minPixels != nil {
		c.MinPixels = *minPixels
	}
	if maxPixels != nil {
		c.MaxPixels = *maxPixels
	}
	return c, c.Validate()
}

// parseTriple reads a per-channel value: a list of three numbers or one number for all three.
func parseTriple(v json.RawMessage) ([3]float64, error) {
	var one float64
	if err := json.Unmarshal(v, &one); err == nil {
		return [3]float64{one, one, one}, nil
	}
	var list []float64
	if err := json.Unmarshal(v, &list); err != nil {
		return [3]float64{}, err
	}
	if len(list) != 3 {
		return [3]float64{}, fmt.Errorf("want 3 channel values, got %d", len(list))
	}
	return [3]float64{list[0], list[1], list[2]}, nil
}

// LoadProcessorConfig reads dir/preprocessor_config.json.
func LoadProcessorConfig(dir string) (ProcessorConfig, error) {
	data, err := os.ReadFile(filepath.Join(dir, "preprocessor_config.json"))
	if err != nil {
		return ProcessorConfig{}, tensor.Errorf(tensor.ErrParam, "qwenvl.LoadProcessorConfig", "dir", "%v", err)
	}
	return ParseProcessorConfig(bytes.TrimSpace(data))
}

// Validate reports the first setting this package cannot honour.
func (c ProcessorConfig) Validate() error {
	const op = "qwenvl.ProcessorConfig"
	switch {
	case c.Resample != resampleBicubic:
		return tensor.Errorf(tensor.ErrParam, op, "resample", "%d: only 3 (BICUBIC, Qwen2VLImageProcessor's default) is implemented", c.Resample)
	case c.PatchSize <= 0:
		return tensor.Errorf(tensor.ErrParam, op, "patch_size", "%d must be positive", c.PatchSize)
	case c.TemporalPatchSize <= 0:
		return tensor.Errorf(tensor.ErrParam, op, "temporal_patch_size", "%d must be positive", c.TemporalPatchSize)
	case c.MergeSize <= 0:
		return tensor.Errorf(tensor.ErrParam, op, "merge_size", "%d must be positive", c.MergeSize)
	case c.MinPixels <= 0 || c.MaxPixels < c.MinPixels:
		return tensor.Errorf(tensor.ErrParam, op, "min_pixels", "need 0 < min_pixels (%d) ≤ max_pixels (%d)", c.MinPixels, c.MaxPixels)
	case c.DoRescale && (math.IsNaN(c.RescaleFactor) || math.IsInf(c.RescaleFactor, 0)):
		return tensor.Errorf(tensor.ErrParam, op, "rescale_factor", "%v is not finite", c.RescaleFactor)
	}
	if c.DoNormalize {
		for i := range 3 {
			if c.ImageStd[i] == 0 || math.IsNaN(c.ImageStd[i]+c.ImageMean[i]) || math.IsInf(c.ImageStd[i]+c.ImageMean[i], 0) {
				return tensor.Errorf(tensor.ErrParam, op, "image_std", "channel %d: mean %v, std %v: need a finite mean and a finite non-zero std", i, c.ImageMean[i], c.ImageStd[i])
			}
		}
	}
	return nil
}
