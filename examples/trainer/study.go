package main

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"
)

// studyArmOrder is the order of the study's arms in its table and plot (others follow by name).
var studyArmOrder = []string{"grpo", "grpo_tgf", "grpo_tas", "vppo", "grpo_entropy", "grpo_random"}

// studyControls are the paired comparisons Study adds to "every arm against the first": the
// perception mask and VPPO against the random mask with the same keep count, which separates
// training on the right tokens from training on fewer tokens.
var studyControls = [][2]string{{"grpo_tgf", "grpo_random"}, {"vppo", "grpo_random"}, {"vppo", "grpo_tas"}}

// studyRun is one seed of one arm: validation accuracy per validated step and the mean
// perception-mask precision and recall over the first and the last fifth of the steps.
type studyRun struct {
	seed           string
	val            map[int]float64
	prec, rec      [2]float64 // first, last fifth of the steps
	base           float64    // visual-token fraction (a random mask's precision)
	lastStep       int
	perceptionSeen bool
}

// Study reads root/<arm>/<seed>/metrics.jsonl (scripts/study.sh writes that layout), prints a
// table of validation accuracy (mean ± standard error over seeds) at fixed steps, the steps to
// reach the warm start's accuracy + delta, a paired t-test of every arm against the first arm
// (same seeds, hence the same warm starts), and the perception mask's precision/recall against
// the labelled visual tokens early and late in training, then each arm's final, late and best
// accuracy with paired comparisons (studyEndpoints); it plots mean ± s.e. per arm into out,
// and the gain over each seed's warm start into out with "_gain" before the extension.
func Study(w io.Writer, root, out string, delta float64) error {
	ents, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	runs := map[string][]studyRun{}
	var arms []string
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		seeds, err := os.ReadDir(filepath.Join(root, e.Name()))
		if err != nil {
			return err
		}
		for _, s := range seeds {
			path := filepath.Join(root, e.Name(), s.Name(), "metrics.jsonl")
			lines, err := ReadMetrics(path)
			if err != nil {
				continue // an unfinished or absent run
			}
			runs[e.Name()] = append(runs[e.Name()], readStudyRun(s.Name(), lines))
		}
		if len(runs[e.Name()]) > 0 {
			arms = append(arms, e.Name())
		}
	}
	if len(arms) == 0 {
		return fmt.Errorf("-study: no runs under %s (want %s/<arm>/<seed>/metrics.jsonl)", root, root)
	}
	rank := func(a string) int {
		for i, v := range studyArmOrder {
			if v == a {
				return i
			}
		}
		return len(studyArmOrder)
	}
	sort.SliceStable(arms, func(i, j int) bool {
		if rank(arms[i]) != rank(arms[j]) {
			return rank(arms[i]) < rank(arms[j])
		}
		return arms[i] < arms[j]
	})
	for _, a := range arms {
		sort.Slice(runs[a], func(i, j int) bool { return runs[a][i].seed < runs[a][j].seed })
	}
	// The validated steps every run of every arm has.
	var steps []int
	for st := range runs[arms[0]][0].val {
		all := true
		for _, a := range arms {
			for _, r := range runs[a] {
				if _, ok := r.val[st]; !ok {
					all = false
				}
			}
		}
		if all {
			steps = append(steps, st)
		}
	}
	sort.Ints(steps)
	if len(steps) == 0 {
		return fmt.Errorf("-study: the runs share no validated step")
	}
	last := steps[len(steps)-1]
	show := []int{steps[0]}
	for _, f := range []float64{0.25, 0.5, 0.75, 1} {
		st := nearest(steps, int(math.Round(f*float64(last))))
		if st != show[len(show)-1] {
			show = append(show, st)
		}
	}
	tw := tabwriter.NewWriter(w, 2, 0, 2, ' ', 0)
	fmt.Fprint(tw, "arm\tseeds")
	for _, st := range show {
		fmt.Fprintf(tw, "\tval acc @%d", st)
	}
	fmt.Fprintf(tw, "\tsteps to start+%.2f (reached)\tpaired Δ end vs %s\tt (df)\tp\n", delta, arms[0])
	palette := []color.RGBA{{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {148, 103, 189, 255}, {255, 127, 14, 255}, {23, 190, 207, 255}}
	var series, gains []Series
	glo, ghi := 0.0, 0.0 // the gain plot's range
	base := map[string]float64{}
	for _, r := range runs[arms[0]] {
		base[r.seed] = r.val[last]
	}
	for i, a := range arms {
		rs := runs[a]
		fmt.Fprintf(tw, "%s\t%d", a, len(rs))
		for _, st := range show {
			m, se := meanSE(collect(rs, func(r studyRun) float64 { return r.val[st] }))
			fmt.Fprintf(tw, "\t%.3f ± %.3f", m, se)
		}
		// Steps to threshold; a run that never reaches it counts as the last step (censored).
		var tt []float64
		reached := 0
		for _, r := range rs {
			at := float64(last)
			for _, st := range steps {
				if st > 0 && r.val[st] >= r.val[steps[0]]+delta {
					at = float64(st)
					reached++
					break
				}
			}
			tt = append(tt, at)
		}
		m, se := meanSE(tt)
		fmt.Fprintf(tw, "\t%.0f ± %.0f (%d/%d)", m, se, reached, len(rs))
		if i == 0 {
			fmt.Fprint(tw, "\t—\t—\t—\n")
		} else {
			var d []float64
			for _, r := range rs {
				if b, ok := base[r.seed]; ok {
					d = append(d, r.val[last]-b)
				}
			}
			dm, dse := meanSE(d)
			tval, p := pairedT(d)
			fmt.Fprintf(tw, "\t%+.3f ± %.3f\t%.2f (%d)\t%.3f\n", dm, dse, tval, len(d)-1, p)
		}
		s := Series{Name: fmt.Sprintf("%s (%d seeds): val/accuracy mean ± s.e.", a, len(rs)), Colour: palette[i%len(palette)], Points: true}
		for _, st := range steps {
			m, se := meanSE(collect(rs, func(r studyRun) float64 { return r.val[st] }))
			s.X, s.Y, s.Band = append(s.X, float64(st)), append(s.Y, m), append(s.Band, se)
		}
		series = append(series, s)
		// The same minus each seed's warm start: the seeds' common offset (their warm starts
		// differ more than the arms do) leaves the band.
		g := Series{Name: fmt.Sprintf("%s (%d seeds): gain over the warm start, mean ± s.e.", a, len(rs)), Colour: s.Colour, Points: true}
		for _, st := range steps {
			m, se := meanSE(collect(rs, func(r studyRun) float64 { return r.val[st] - r.val[steps[0]] }))
			g.X, g.Y, g.Band = append(g.X, float64(st)), append(g.Y, m), append(g.Band, se)
			glo, ghi = math.Min(glo, m-se), math.Max(ghi, m+se)
		}
		gains = append(gains, g)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 2, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "arm\tperception precision, first → last fifth\trecall, first → last fifth\tvisual-token fraction (random mask's precision)")
	for _, a := range arms {
		rs := runs[a]
		if !rs[0].perceptionSeen {
			continue
		}
		p0, _ := meanSE(collect(rs, func(r studyRun) float64 { return r.prec[0] }))
		p1, _ := meanSE(collect(rs, func(r studyRun) float64 { return r.prec[1] }))
		r0, _ := meanSE(collect(rs, func(r studyRun) float64 { return r.rec[0] }))
		r1, _ := meanSE(collect(rs, func(r studyRun) float64 { return r.rec[1] }))
		b, _ := meanSE(collect(rs, func(r studyRun) float64 { return r.base }))
		fmt.Fprintf(tw, "%s\t%.3f → %.3f\t%.3f → %.3f\t%.3f\n", a, p0, p1, r0, r1, b)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if err := studyEndpoints(w, arms, runs, steps); err != nil {
		return err
	}
	png, err := PlotPNG("validation accuracy, mean ± standard error over seeds", "RL step", "val/accuracy", 0, 1, series)
	if err != nil {
		return err
	}
	if err := WriteFileAtomic(out, png); err != nil {
		return err
	}
	pad := 0.1 * (ghi - glo)
	png, err = PlotPNG("validation accuracy minus the seed's warm start, mean ± s.e. over seeds", "RL step", "val/accuracy gain", glo-pad, ghi+pad, gains)
	if err != nil {
		return err
	}
	return WriteFileAtomic(studyGainPath(out), png)
}

// studyGainPath is where Study writes its second plot, the gains over the warm start: out with
// "_gain" before the extension.
func studyGainPath(out string) string {
	ext := filepath.Ext(out)
	return strings.TrimSuffix(out, ext) + "_gain" + ext
}

// studyEndpoints prints each arm's final, best and late accuracy (the mean over the validations
// in the last fifth of the steps, less noisy than one validation), then paired comparisons on
// each across seeds: every arm against the first, and the studyControls present.
func studyEndpoints(w io.Writer, arms []string, runs map[string][]studyRun, steps []int) error {
	last := steps[len(steps)-1]
	endpoint := map[string]func(studyRun) float64{
		"final": func(r studyRun) float64 { return r.val[last] },
		"best": func(r studyRun) float64 {
			b := math.Inf(-1)
			for _, st := range steps {
				b = math.Max(b, r.val[st])
			}
			return b
		},
		"late": func(r studyRun) float64 {
			var xs []float64
			for _, st := range steps {
				if st > last-max(1, last/5) {
					xs = append(xs, r.val[st])
				}
			}
			return mean(xs)
		},
	}
	names := []string{"final", "late", "best"}
	tw := tabwriter.NewWriter(w, 2, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "arm	final (step %d)	late (mean of steps > %d)	best	gain final − start\n", last, last-max(1, last/5))
	for _, a := range arms {
		fmt.Fprint(tw, a)
		for _, n := range names {
			m, se := meanSE(collect(runs[a], endpoint[n]))
			fmt.Fprintf(tw, "	%.3f ± %.3f", m, se)
		}
		m, se := meanSE(collect(runs[a], func(r studyRun) float64 { return r.val[last] - r.val[steps[0]] }))
		fmt.Fprintf(tw, "	%+.3f ± %.3f\n", m, se)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var pairs [][2]string
	for _, a := range arms[1:] {
		pairs = append(pairs, [2]string{a, arms[0]})
	}
	for _, c := range studyControls {
		if len(runs[c[0]]) > 0 && len(runs[c[1]]) > 0 && c[1] != arms[0] {
			pairs = append(pairs, c)
		}
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 2, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "comparison (paired by seed)	endpoint	Δ mean ± s.e.	t (df)	p (paired t)	wins (sign test p)")
	for _, pr := range pairs {
		other := map[string]studyRun{}
		for _, r := range runs[pr[1]] {
			other[r.seed] = r
		}
		for _, n := range names {
			var d []float64
			for _, r := range runs[pr[0]] {
				if o, ok := other[r.seed]; ok {
					d = append(d, endpoint[n](r)-endpoint[n](o))
				}
			}
			m, se := meanSE(d)
			tval, p := pairedT(d)
			wins, n0 := 0, 0
			for _, x := range d {
				if x > 0 {
					wins++
				}
				if x != 0 {
					n0++
				}
			}
			fmt.Fprintf(tw, "%s − %s	%s	%+.3f ± %.3f	%.2f (%d)	%.3f	%d/%d (%.3f)\n", pr[0], pr[1], n, m, se, tval, len(d)-1, p, wins, n0, signTest(wins, n0))
		}
	}
	return tw.Flush()
}

// signTest is the two-sided exact binomial p-value of k wins among n non-tied pairs (1 when n
// is 0).
func signTest(k, n int) float64 {
	if n == 0 {
		return 1
	}
	tail := distuv.Binomial{N: float64(n), P: 0.5}.CDF(float64(min(k, n-k)))
	return math.Min(1, 2*tail)
}

func readStudyRun(seed string, lines []MetricsLine) studyRun {
	r := studyRun{seed: seed, val: map[int]float64{}}
	var prec, rec, base []float64
	var pst []int
	for _, l := range lines {
		if v := l.Metrics["val/accuracy"]; v != nil {
			r.val[l.Step] = *v
		}
		r.lastStep = max(r.lastStep, l.Step)
		p, q := l.Metrics["perception/precision"], l.Metrics["perception/recall"]
		if p != nil && q != nil && l.Step > 0 {
			prec, rec, pst = append(prec, *p), append(rec, *q), append(pst, l.Step)
			r.perceptionSeen = true
		}
		if v := l.Metrics["perception/visual_token_fraction"]; v != nil {
			base = append(base, *v)
		}
	}
	fifth := max(1, r.lastStep/5)
	var p0, p1, r0, r1 []float64
	for i, st := range pst {
		if st <= max(fifth, pst[0]) {
			p0, r0 = append(p0, prec[i]), append(r0, rec[i])
		}
		if st > r.lastStep-fifth {
			p1, r1 = append(p1, prec[i]), append(r1, rec[i])
		}
	}
	r.prec = [2]float64{mean(p0), mean(p1)}
	r.rec = [2]float64{mean(r0), mean(r1)}
	r.base = mean(base)
	return r
}

func collect(rs []studyRun, f func(studyRun) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

// meanSE returns the mean and the standard error of the mean (0 for fewer than two values).
func meanSE(xs []float64) (float64, float64) {
	if len(xs) < 2 {
		return mean(xs), 0
	}
	m, sd := stat.MeanStdDev(xs, nil)
	return m, sd / math.Sqrt(float64(len(xs)))
}

// pairedT is the one-sample t-test of the paired differences d against 0: t and the two-sided
// p-value (NaN with fewer than two pairs or no spread).
func pairedT(d []float64) (float64, float64) {
	m, se := meanSE(d)
	if len(d) < 2 || se == 0 {
		return math.NaN(), math.NaN()
	}
	t := m / se
	dist := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(len(d) - 1)}
	return t, 2 * dist.CDF(-math.Abs(t))
}

func nearest(xs []int, v int) int {
	best := xs[0]
	for _, x := range xs {
		if abs(x-v) < abs(best-v) {
			best = x
		}
	}
	return best
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
