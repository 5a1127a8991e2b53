package main

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"strings"
	"text/tabwriter"
)

// Compare reads the metrics.jsonl of several runs ("name=dir,name=dir"), plots their validation
// accuracy and training accuracy over RL steps into one PNG, and prints a table of the numbers.
func Compare(w io.Writer, spec, out string) error {
	palette := []color.RGBA{{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {148, 103, 189, 255}, {255, 127, 14, 255}, {23, 190, 207, 255}}
	var series []Series
	tw := tabwriter.NewWriter(w, 2, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "run\tval acc start\tval acc end\tval acc max\ttrain acc first 10\ttrain acc last 10\tperception precision\tsteps/s")
	for i, item := range strings.Split(spec, ",") {
		name, dir, ok := strings.Cut(item, "=")
		if !ok {
			return fmt.Errorf("-compare: %q: want name=dir", item)
		}
		lines, err := ReadMetrics(filepath.Join(dir, "metrics.jsonl"))
		if err != nil {
			return err
		}
		col := palette[i%len(palette)]
		val := Series{Name: name + ": val/accuracy", Colour: col, Points: true}
		train := Series{Name: name + ": train reward/accuracy (10-step mean)", Colour: col, Dashed: true, Smooth: 10}
		var accs, prec, stepS []float64
		for _, l := range lines {
			if v := l.Metrics["val/accuracy"]; v != nil {
				val.X, val.Y = append(val.X, float64(l.Step)), append(val.Y, *v)
			}
			if l.Step == 0 {
				continue
			}
			if v := l.Metrics["reward/accuracy"]; v != nil {
				accs = append(accs, *v)
				train.X, train.Y = append(train.X, float64(l.Step)), append(train.Y, *v)
			}
			if v := l.Metrics["perception/precision"]; v != nil {
				prec = append(prec, *v)
			}
			if v := l.Metrics["perf/time_per_step"]; v != nil {
				stepS = append(stepS, *v)
			} else if v := l.Metrics["perf/step_s"]; v != nil { // runs of earlier versions
				stepS = append(stepS, *v)
			}
		}
		series = append(series, val, train)
		vmax := math.Inf(-1)
		for _, v := range val.Y {
			vmax = math.Max(vmax, v)
		}
		first, last := math.NaN(), math.NaN()
		if n := len(val.Y); n > 0 {
			first, last = val.Y[0], val.Y[n-1]
		}
		k := min(10, len(accs))
		fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\n", name, first, last, vmax,
			mean(accs[:k]), mean(accs[len(accs)-k:]), mean(prec), 1/mean(stepS))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	png, err := PlotPNG("accuracy over RL steps (same seeds and budget)", "RL step", "accuracy", 0, 1, series)
	if err != nil {
		return err
	}
	return WriteFileAtomic(out, png)
}
