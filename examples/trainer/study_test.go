package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPairedT(t *testing.T) {
	// d = 1, 2, 3: mean 2, s.e. 1/sqrt(3), t = 2*sqrt(3) = 3.464, df 2, two-sided p = 0.0742.
	tv, p := pairedT([]float64{1, 2, 3})
	if math.Abs(tv-2*math.Sqrt(3)) > 1e-12 || math.Abs(p-0.07418) > 1e-4 {
		t.Fatalf("t %v p %v", tv, p)
	}
	if _, p := pairedT([]float64{1}); !math.IsNaN(p) {
		t.Fatal("one pair must give NaN")
	}
}

func TestStudy(t *testing.T) {
	root := t.TempDir()
	writeStudyRuns(t, root, []string{"vppo", "grpo"}, 20, func(ai, s, st int) string {
		acc := 0.3 + float64(st)/100*float64(2-ai) + 0.01*float64(s)
		return fmt.Sprintf(`{"step":%d,"val/accuracy":%g,"perception/precision":0.2,"perception/recall":0.5,"perception/visual_token_fraction":0.1}`, st, acc)
	})
	var out bytes.Buffer
	png := filepath.Join(root, "study.png")
	if err := Study(&out, root, png, 0.05); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	// grpo comes first (the baseline); vppo gains 0.1 more per 10 steps than grpo at every seed.
	if !strings.Contains(got, "grpo  3") || strings.Index(got, "grpo") > strings.Index(got, "vppo") {
		t.Fatalf("arm order or seed count wrong:\n%s", got)
	}
	for _, want := range []string{"0.320 ± 0.006", "0.420 ± 0.006", "+0.200 ± 0.000", "10 ± 0 (3/3)", "0.200 → 0.200"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	for _, f := range []string{png, filepath.Join(root, "study_gain.png")} {
		if fi, err := os.Stat(f); err != nil || fi.Size() == 0 {
			t.Fatal("no plot", f, err)
		}
	}
}

func TestSignTest(t *testing.T) {
	// 5 wins of 5: 2 * 0.5^5; 4 of 5: 2 * 6/32; 0 pairs: 1.
	for _, c := range []struct {
		k, n int
		p    float64
	}{{5, 5, 0.0625}, {0, 5, 0.0625}, {4, 5, 0.375}, {2, 4, 1}, {0, 0, 1}} {
		if got := signTest(c.k, c.n); math.Abs(got-c.p) > 1e-12 {
			t.Errorf("signTest(%d, %d) = %v, want %v", c.k, c.n, got, c.p)
		}
	}
}

// TestStudyControls: the endpoint table and the paired comparisons against the random mask.
func TestStudyControls(t *testing.T) {
	root := t.TempDir()
	// grpo_random gains 0.01 per 10 steps, grpo_tgf 0.02 and vppo 0.03, at every seed.
	writeStudyRuns(t, root, []string{"grpo", "grpo_random", "grpo_tgf", "vppo"}, 50, func(ai, s, st int) string {
		return fmt.Sprintf(`{"step":%d,"val/accuracy":%g}`, st, 0.3+0.01*float64(s)+float64(st)/1000*float64(ai))
	})
	var out bytes.Buffer
	if err := Study(&out, root, filepath.Join(root, "study.png"), 0.05); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	line := func(prefix, endpoint string) string {
		for _, l := range strings.Split(got, "\n") {
			if f := strings.Fields(l); strings.HasPrefix(l, prefix) && len(f) > 3 && f[3] == endpoint {
				return l
			}
		}
		return ""
	}
	for _, c := range []struct{ prefix, endpoint, want string }{
		{"vppo − grpo_random ", "final", "+0.100 ± 0.000"}, // (3-1) * 50/1000
		{"grpo_tgf − grpo_random ", "late", "+0.050 ± 0.000"},
		{"vppo − grpo ", "best", "3/3 (0.250)"},
	} {
		if l := line(c.prefix, c.endpoint); !strings.Contains(l, c.want) {
			t.Errorf("%s%s: %q lacks %q in\n%s", c.prefix, c.endpoint, l, c.want, got)
		}
	}
	if !strings.Contains(got, "0.470 ± 0.006") { // vppo's final and best: 0.3 + 0.02 + 0.15
		t.Errorf("vppo's final accuracy missing in\n%s", got)
	}
	if strings.Contains(got, "grpo_random − grpo_random") {
		t.Errorf("a control compared with itself:\n%s", got)
	}
}

// writeStudyRuns writes root/<arm>/s<seed>/metrics.jsonl for seeds 1..3, a line every 10 steps up
// to last made by line(arm index, seed, step).
func writeStudyRuns(t *testing.T, root string, arms []string, last int, line func(ai, s, st int) string) {
	t.Helper()
	for ai, arm := range arms {
		for s := 1; s <= 3; s++ {
			dir := filepath.Join(root, arm, fmt.Sprintf("s%d", s))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			for st := 0; st <= last; st += 10 {
				b.WriteString(line(ai, s, st) + "\n")
			}
			if err := os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
