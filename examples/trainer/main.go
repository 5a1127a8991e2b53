// Command trainer trains a small vision-language policy with VPPO (token-perception RL) on a
// generated visual question-answering task, on the CPU, in a few minutes:
//
//	go run ./examples/trainer                                   # the embedded default.yaml
//	go run ./examples/trainer optimization.enable_perception_filtering=false   # plain GRPO
//	go run ./examples/trainer -config my.yaml training.steps=20 worker.rollout.n=4
//	go run ./examples/trainer training.run_dir=runs/a training.find_last_checkpoint=true   # resume
//	go run ./examples/trainer -config mtrl-config.yaml worker.actor.model.model_path= training.steps=50   # the seeds' config, built-in model
//	go run ./examples/trainer worker.actor.model.model_path=DIR worker.actor.model.lora_rank=8   # a Hugging Face checkpoint, text prompts
//
// Ctrl-C (SIGINT) or SIGTERM finishes the current step, writes a checkpoint and prints the
// command that resumes.
//
// A supervised warm start on the reference answers comes first, then RL steps (step.go has the
// whole algorithm in one function). Outputs go to the run directory: metrics.jsonl (one line per
// step, the reference's metric names), curves.png (reward and accuracy over steps), rollouts.md
// (sample responses with the perception mask), checkpoints/global_step_N (safetensors weights,
// optimizer and RNG state, data position, config), config.yaml and summary.json.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"text/tabwriter"
)

func main() {
	fs := flag.NewFlagSet("trainer", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "YAML configuration file (keys it sets replace the embedded defaults)")
	printCfg := fs.Bool("print-config", false, "print the resolved configuration and exit")
	compare := fs.String("compare", "", "instead of training: plot the runs name=dir,name=dir,... (their metrics.jsonl) into -o and print a table")
	outPNG := fs.String("o", "compare.png", "output PNG of -compare or -study")
	study := fs.String("study", "", "instead of training: summarize DIR/<arm>/<seed>/metrics.jsonl (scripts/study.sh) as a table with mean ± s.e., steps to threshold and paired t-tests, and plot -o")
	studyDelta := fs.Float64("study-delta", 0.05, "-study's threshold: the warm start's validation accuracy + this")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: trainer [-config file.yaml] [-print-config] [key.path=value ...]\n       trainer -compare name=dir,name=dir,... [-o out.png]\n\n")
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "\nDefault configuration:\n\n%s", defaultYAML)
	}
	overrides, err := parseArgs(fs, os.Args[1:])
	if err != nil {
		os.Exit(2)
	}
	if *study != "" {
		if err := Study(os.Stdout, *study, *outPNG, *studyDelta); err != nil {
			fmt.Fprintln(os.Stderr, "trainer:", err)
			os.Exit(1)
		}
		return
	}
	if *compare != "" {
		if err := Compare(os.Stdout, *compare, *outPNG); err != nil {
			fmt.Fprintln(os.Stderr, "trainer:", err)
			os.Exit(1)
		}
		return
	}
	// The seeds' command lines name the file as an override: config=config.yaml.
	var rest []string
	for _, o := range overrides {
		if v, ok := strings.CutPrefix(o, "config="); ok && *cfgPath == "" {
			*cfgPath = v
			continue
		}
		rest = append(rest, o)
	}
	cfg, err := LoadConfig(*cfgPath, rest)
	if err != nil {
		fmt.Fprintln(os.Stderr, "trainer:", err)
		os.Exit(2)
	}
	if *printCfg {
		for _, w := range cfg.Warnings() {
			fmt.Fprintln(os.Stderr, "warning:", w)
		}
		os.Stdout.Write(cfg.YAML())
		return
	}
	_, err = Run(signalContext(os.Stderr), cfg, os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "trainer:", err)
	}
	finishProcess(err != nil && !errors.Is(err, ErrInterrupted))
	if err != nil {
		if errors.Is(err, ErrInterrupted) {
			os.Exit(130)
		}
		os.Exit(1)
	}
}

// signalContext is cancelled by the first SIGINT or SIGTERM, which then ends the run after the
// current step, with a checkpoint; the handler is removed at that point, so a second signal
// stops the process at once.
func signalContext(stderr io.Writer) context.Context {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
		fmt.Fprintln(stderr, "\ntrainer: stopping after the current step (again to quit at once, losing it)")
	}()
	return ctx
}

// parseArgs parses flags and key=value overrides in any order (flag stops at the first
// non-flag argument, so parsing resumes after each override).
func parseArgs(fs *flag.FlagSet, args []string) (overrides []string, err error) {
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return overrides, nil
		}
		overrides = append(overrides, rest[0])
		args = rest[1:]
	}
}

// Summary is the outcome of a run (also written to summary.json).
type Summary struct {
	RunDir           string  `json:"run_dir"`
	Steps            int     `json:"steps"`
	ValAccInit       float64 `json:"val_accuracy_init"`  // before the warm start
	ValAccStart      float64 `json:"val_accuracy_start"` // after the warm start = RL start
	ValAccEnd        float64 `json:"val_accuracy_end"`
	ValFormatStart   float64 `json:"val_format_start"`
	ValFormatEnd     float64 `json:"val_format_end"`
	RewardStart      float64 `json:"reward_overall_start"` // mean over the first 5 RL steps
	RewardEnd        float64 `json:"reward_overall_end"`   // mean over the last 5
	TrainAccStart    float64 `json:"train_accuracy_start"`
	TrainAccEnd      float64 `json:"train_accuracy_end"`
	PerceptionPrec   float64 `json:"perception_precision"` // mean over steps
	VisualFraction   float64 `json:"visual_token_fraction"`
	SkippedSteps     float64 `json:"skipped_steps"`
	StepsPerSecond   float64 `json:"steps_per_s"`
	TokensPerSecond  float64 `json:"tokens_per_s"`
	WarmStartSeconds float64 `json:"warm_start_s"`
	RLSeconds        float64 `json:"rl_s"`
	WallSeconds      float64 `json:"wall_s"`
}

func writePlot(dir string, lines []MetricsLine) error {
	get := func(key string) Series {
		var s Series
		for _, l := range lines {
			if v, ok := l.Metrics[key]; ok && v != nil {
				s.X, s.Y = append(s.X, float64(l.Step)), append(s.Y, *v)
			}
		}
		return s
	}
	// Per-step training metrics: raw faint, 10-step trailing mean on top; validation as points.
	reward, acc, val := get("reward/overall"), get("reward/accuracy"), get("val/accuracy")
	reward.Name, reward.Colour, reward.Smooth = "train reward/overall (10-step mean)", color.RGBA{31, 119, 180, 255}, 10
	acc.Name, acc.Colour, acc.Smooth = "train reward/accuracy (10-step mean)", color.RGBA{255, 127, 14, 255}, 10
	val.Name, val.Colour, val.Points = "val/accuracy (greedy, held-out prompts)", color.RGBA{44, 160, 44, 255}, true
	png, err := PlotPNG("VPPO on the generated VQA task: "+filepath.Base(dir), "RL step", "reward / accuracy", 0, 1, []Series{reward, acc, val})
	if err != nil {
		return err
	}
	return WriteFileAtomic(filepath.Join(dir, "curves.png"), png)
}

func printSummary(w io.Writer, s Summary) {
	tw := tabwriter.NewWriter(w, 2, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\n\tinit\tafter warm start (RL start)\tend of RL (step %d)\n", s.Steps)
	fmt.Fprintf(tw, "val/accuracy (held-out, greedy)\t%.3f\t%.3f\t%.3f\n", s.ValAccInit, s.ValAccStart, s.ValAccEnd)
	fmt.Fprintf(tw, "val/format\t\t%.3f\t%.3f\n", s.ValFormatStart, s.ValFormatEnd)
	fmt.Fprintf(tw, "train reward/overall (first / last 5 steps)\t\t%.3f\t%.3f\n", s.RewardStart, s.RewardEnd)
	fmt.Fprintf(tw, "train reward/accuracy (first / last 5 steps)\t\t%.3f\t%.3f\n", s.TrainAccStart, s.TrainAccEnd)
	tw.Flush()
	fmt.Fprintf(w, "perception mask precision %.3f (visual tokens are %.3f of all tokens); skipped optimizer steps %.0f\n",
		s.PerceptionPrec, s.VisualFraction, s.SkippedSteps)
	fmt.Fprintf(w, "time: warm start %.1fs, RL %.1fs (%.3f steps/s, %.0f tokens/s), total %.1fs\n",
		s.WarmStartSeconds, s.RLSeconds, s.StepsPerSecond, s.TokensPerSecond, s.WallSeconds)
	fmt.Fprintf(w, "run dir: %s (metrics.jsonl, curves.png, rollouts.md, checkpoints/)\n", s.RunDir)
}

// MarshalJSON writes the fields in order with non-finite numbers as null (JSON has no NaN).
func (s Summary) MarshalJSON() ([]byte, error) {
	v := reflect.ValueOf(s)
	var b bytes.Buffer
	b.WriteString("{")
	for i := range v.NumField() {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%q:", strings.Split(v.Type().Field(i).Tag.Get("json"), ",")[0])
		f := v.Field(i)
		if f.Kind() == reflect.Float64 && (math.IsNaN(f.Float()) || math.IsInf(f.Float(), 0)) {
			b.WriteString("null")
			continue
		}
		x, err := json.Marshal(f.Interface())
		if err != nil {
			return nil, err
		}
		b.Write(x)
	}
	b.WriteString("}")
	return b.Bytes(), nil
}
