// Command datagen writes a dataset of the example trainer's visual
// question-answering task (package examples/internal/vqa) to disk, in the seeds' format:
//
//	go run ./examples/datagen DIR                     # DIR/train.jsonl, DIR/val.jsonl, DIR/images/
//	go run ./examples/datagen -n-train 2000 -n-val 200 -seed 1 -format both DIR
//
// Each row has prompt, answer (the option letter) and images (one PNG path relative to
// DIR/images, the seeds' image_dir), plus the task's optional fields response (the reference
// chain, for the warm start), objects (the scene, for the visual-token diagnostics) and id.
// Parquet files embed the PNG bytes. The output directory must be named: nothing is written into
// the current directory unless asked. Training samples have ids 0..n-train-1 and validation
// samples ids n-train..n-train+n-val-1 of the same seed, so the splits never
// share a sample. The trainer reads the files with dataset.train_files /
// dataset.val_files (or generates the same samples in memory).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

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
	out := fs.String("out", "", "output directory (created if needed); the same as the DIR argument")
	nTrain := fs.Int("n-train", 2000, "number of training samples (>= 0)")
	nVal := fs.Int("n-val", 200, "number of validation samples (>= 0)")
	seed := fs.Uint64("seed", 1, "generator seed")
	format := fs.String("format", "jsonl", "file format: jsonl, parquet or both")
	size := fs.Int("image-size", def.ImageSize, "image side in pixels")
	maxShapes := fs.Int("max-shapes", def.MaxShapes, "maximum shapes per image (1..4)")
	options := fs.Int("options", def.Options, "answer options per question (2..10)")
	ordered := fs.Bool("ordered-options", def.OrderedOptions, "list options in the value lists' order (false: shuffled)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() == 1 && *out == "":
		*out = fs.Arg(0)
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q (want one output directory)", fs.Args())
	}
	if *out == "" {
		return fmt.Errorf("name the output directory: datagen DIR (or -out DIR)")
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
	cfg := vqa.TaskConfig{ImageSize: *size, MaxShapes: *maxShapes, Options: *options, OrderedOptions: *ordered}
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
	fmt.Fprintf(stdout, "train with: go run ./examples/trainer dataset.train_files=%s dataset.val_files=%s dataset.image_dir=%s\n",
		filepath.Join(*out, "train."+firstExt(*format)), filepath.Join(*out, "val."+firstExt(*format)), filepath.Join(*out, "images"))
	return nil
}

func firstExt(format string) string {
	if format == "parquet" {
		return "parquet"
	}
	return "jsonl"
}
