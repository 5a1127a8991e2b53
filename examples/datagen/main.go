// Command datagen writes a dataset of the example trainer's visual
// question-answering task (package examples/internal/vqa) to disk:
//
//	go run ./examples/datagen -out data -n-train 2000 -n-val 200 -seed 1 -format both
//
// writes data/train.{jsonl,parquet}, data/val.{jsonl,parquet} and the PNGs
// under data/images/. Training samples have ids 0..n-train-1 and validation
// samples ids n-train..n-train+n-val-1 of the same seed, so the splits never
// share a sample. The trainer reads the files with dataset.train_files /
// dataset.val_files (or generates the same samples in memory).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/mtrl-go/mtrl/examples/internal/vqa"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "datagen:", err)
		os.Exit(2)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("datagen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := vqa.DefaultTaskConfig()
	out := fs.String("out", "data", "output directory (created if needed)")
	nTrain := fs.Int("n-train", 2000, "number of training samples (>= 0)")
	nVal := fs.Int("n-val", 200, "number of validation samples (>= 0)")
	seed := fs.Uint64("seed", 1, "generator seed")
	format := fs.String("format", "jsonl", "file format: jsonl, parquet or both")
	size := fs.Int("image-size", def.ImageSize, "image side in pixels")
	maxShapes := fs.Int("max-shapes", def.MaxShapes, "maximum shapes per image (1..4)")
	options := fs.Int("options", def.Options, "answer options per question (2..10)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *out == "" {
		return fmt.Errorf("-out must not be empty")
	}
	if *nTrain < 0 || *nVal < 0 {
		return fmt.Errorf("-n-train and -n-val must be >= 0, got %d and %d", *nTrain, *nVal)
	}
	if *nTrain+*nVal == 0 {
		return fmt.Errorf("-n-train and -n-val are both 0: nothing to write")
	}
	var writers []func(dir, name string, s []vqa.Sample) (string, error)
	switch *format {
	case "jsonl":
		writers = append(writers, vqa.WriteJSONL)
	case "parquet":
		writers = append(writers, vqa.WriteParquet)
	case "both":
		writers = append(writers, vqa.WriteJSONL, vqa.WriteParquet)
	default:
		return fmt.Errorf("-format must be jsonl, parquet or both, got %q", *format)
	}
	cfg := vqa.TaskConfig{ImageSize: *size, MaxShapes: *maxShapes, Options: *options}
	if err := cfg.Validate(); err != nil {
		return err
	}
	splits := []struct {
		name  string
		first uint64
		n     int
	}{{"train", 0, *nTrain}, {"val", uint64(*nTrain), *nVal}}
	for _, sp := range splits {
		if sp.n == 0 {
			continue
		}
		samples := vqa.Generate(cfg, *seed, sp.first, sp.n)
		for _, w := range writers {
			path, err := w(*out, sp.name, samples)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "wrote %s: %d samples (ids %d..%d, seed %d, %dx%d images, <= %d shapes, %d options)\n",
				path, sp.n, sp.first, sp.first+uint64(sp.n)-1, *seed, cfg.ImageSize, cfg.ImageSize, cfg.MaxShapes, cfg.Options)
		}
	}
	return nil
}
