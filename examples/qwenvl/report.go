package qwenvl

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/mtrl-go/mtrl/tensor"
)

// Report is what `hf preprocess` prints: image_grid_thw, the shape of pixel_values, statistics
// of its values (population std, sums in float64) and each image's size before and after
// smart_resize.
type Report struct {
	ImageGridTHW     [][3]int      `json:"image_grid_thw"`
	PixelValuesShape [2]int        `json:"pixel_values_shape"`
	Stats            Stats         `json:"pixel_values_stats"`
	Images           []ImageReport `json:"images"`
}

// Stats summarises a tensor's values.
type Stats struct {
	Mean float64 `json:"mean"`
	Std  float64 `json:"std"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
	Sum  float64 `json:"sum"`
}

// ImageReport is one input image: its file, size, resized size and number of LLM tokens.
type ImageReport struct {
	File          string `json:"file"`
	Width         int    `json:"width"`
	Height        int    `json:"height"`
	ResizedWidth  int    `json:"resized_width"`
	ResizedHeight int    `json:"resized_height"`
	Tokens        int    `json:"tokens"`
}

// Result is Preprocess's output: the patches and their report.
type Result struct {
	Patches Patches
	Report  Report
}

// Preprocess reads dir/preprocessor_config.json and preprocesses the image files as one row's
// images: pixel_values [Σ grid_t·grid_h·grid_w, 3·temporal_patch_size·patch²] and image_grid_thw.
func Preprocess(dir string, images []string) (Result, error) {
	if len(images) == 0 {
		return Result{}, tensor.Errorf(tensor.ErrParam, "qwenvl.Preprocess", "images", "no image files")
	}
	cfg, err := LoadProcessorConfig(dir)
	if err != nil {
		return Result{}, err
	}
	proc, err := NewProcessor(cfg)
	if err != nil {
		return Result{}, err
	}
	imgs := make([]*RGB, len(images))
	for i, path := range images {
		if imgs[i], err = LoadImage(path); err != nil {
			return Result{}, err
		}
	}
	patches, err := proc.Images(imgs)
	if err != nil {
		return Result{}, err
	}
	rep := Report{PixelValuesShape: [2]int{patches.Rows, patches.Cols}, Stats: StatsOf(patches.Values)}
	for i, g := range patches.Grids {
		rep.ImageGridTHW = append(rep.ImageGridTHW, [3]int{g.T, g.H, g.W})
		rep.Images = append(rep.Images, ImageReport{
			File: images[i], Width: imgs[i].Width, Height: imgs[i].Height,
			ResizedWidth: patches.Resized[i].Width, ResizedHeight: patches.Resized[i].Height,
			Tokens: g.Tokens(cfg.MergeSize),
		})
	}
	return Result{Patches: patches, Report: rep}, nil
}

// StatsOf returns the mean, population standard deviation, extremes and sum of v, summed in
// float64 in index order. An empty v gives zeros.
func StatsOf(v []float32) Stats {
	if len(v) == 0 {
		return Stats{}
	}
	s := Stats{Min: math.Inf(1), Max: math.Inf(-1)}
	for _, x := range v {
		s.Sum += float64(x)
		s.Min = min(s.Min, float64(x))
		s.Max = max(s.Max, float64(x))
	}
	s.Mean = s.Sum / float64(len(v))
	var sq float64
	for _, x := range v {
		d := float64(x) - s.Mean
		sq += d * d
	}
	s.Std = math.Sqrt(sq / float64(len(v)))
	return s
}

// imageFlags collects repeated -image flags.
type imageFlags []string

func (f *imageFlags) String() string     { return strings.Join(*f, ",") }
func (f *imageFlags) Set(v string) error { *f = append(*f, v); return nil }

// RunPreprocessCommand is `hf preprocess -model DIR -image FILE [-image FILE…] [FILE…]`: it
// preprocesses the images (the -image flags, then any further arguments) with DIR's
// preprocessor_config.json and writes the Report as one line of JSON to stdout.
func RunPreprocessCommand(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("preprocess", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	model := fs.String("model", "", "checkpoint directory holding preprocessor_config.json")
	var images imageFlags
	fs.Var(&images, "image", "image file (PNG, JPEG or GIF); repeat for several images")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("preprocess: %v (usage: preprocess -model DIR -image FILE…)", err)
	}
	images = append(images, fs.Args()...)
	if *model == "" {
		return fmt.Errorf("preprocess: -model DIR is required")
	}
	res, err := Preprocess(*model, images)
	if err != nil {
		return err
	}
	line, err := json.Marshal(res.Report)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", line)
	return err
}
