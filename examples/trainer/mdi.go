package main

import (
	"bytes"
	"fmt"
	"math"
	"path/filepath"

	"github.com/mtrl-go/mtrl/examples/internal/vlm"
	"github.com/mtrl-go/mtrl/examples/internal/vqa"
)

// The MDI reward of TRL-MDI: from the policy's attention while it produced the response,
//
//	MDI     = (attention on text / text tokens) / (attention on vision / vision tokens)
//	balance = clip(1 − |log MDI| / log R, 0, 1),   R = worker.reward.mdi_balance_ratio
//	reward  = w · (2·balance − 1),                  w = worker.reward.mdi_weight
//
// The attention is that of each response token's query (the position that predicts it), over
// the image tokens and the text tokens it may attend (prompt and response so far), averaged over
// heads, layers and the response's tokens. The combined reward keeps this trainer's normalised
// scale: overall = (a·accuracy + f·format + w·(2·balance − 1)) / (a + f + w), the seeds' 4:1:1
// sum divided by a constant.

// layerRanges names the diagnostics' groups of blocks for a model of the given depth: the
// early / middle / late thirds, with fewer groups than three when there are fewer blocks, so
// that every group has a block (block l is in group l·groups/layers, vlm.ResponseAttention).
func layerRanges(layers int) []string {
	switch {
	case layers <= 1:
		return []string{"all"}
	case layers == 2:
		return []string{"early", "late"}
	}
	return []string{"early", "middle", "late"}
}

// mdiStats is one response's attention split.
type mdiStats struct {
	MDI, Balance float64
	// Per-token attention (mass / keys) on text and on vision, overall and per layer range
	// (layerRanges).
	Text, Vision           float64
	RangeText, RangeVision []float64
}

// attentionStats computes the MDI of one response from its attention sums
// (vlm.Activations.ResponseAttention over the thirds of the blocks) and its n tokens. The sums
// run where the record is: on the device the attention maps stay there and only a row's eight
// float64 sums come down.
func (t *Trainer) attentionStats(a vlm.AttentionSums, layers, n int) mdiStats {
	groups := len(a.GroupText)
	s := mdiStats{MDI: math.NaN(), Balance: 0, RangeText: make([]float64, groups), RangeVision: make([]float64, groups)}
	if n == 0 {
		s.Text, s.Vision = math.NaN(), math.NaN()
		for g := range groups {
			s.RangeText[g], s.RangeVision[g] = math.NaN(), math.NaN()
		}
		return s
	}
	s.Text, s.Vision = a.Text/float64(layers*n), a.Vision/float64(layers*n)
	for g := range groups {
		rn := 0 // the range's blocks times the response's tokens
		for l := range layers {
			if l*groups/layers == g {
				rn += n
			}
		}
		s.RangeText[g], s.RangeVision[g] = a.GroupText[g]/float64(rn), a.GroupVision[g]/float64(rn)
	}
	s.MDI = s.Text / s.Vision
	s.Balance = mdiBalance(s.MDI, t.cfg.Worker.Reward.MDIBalanceRatio)
	return s
}

// mdiBalance is clip(1 − |log mdi| / log r, 0, 1); 0 for a non-finite or non-positive mdi.
func mdiBalance(mdi, r float64) float64 {
	if !(mdi > 0) || math.IsInf(mdi, 0) {
		return 0
	}
	return math.Max(0, math.Min(1, 1-math.Abs(math.Log(mdi))/math.Log(r)))
}

// withMDI adds the MDI reward to a response's answer and format score.
func (t *Trainer) withMDI(s vqa.Reward, balance float64) vqa.Reward {
	a, f, w := t.reward.Accuracy, t.reward.Format, t.cfg.Worker.Reward.MDIWeight
	s.Overall = (s.Overall*(a+f) + w*(2*balance-1)) / (a + f + w)
	return s
}

func putMDIMetrics(met Metrics, rows []mdiStats, layers int) {
	var bal, logm, text, vis []float64
	names := layerRanges(layers)
	rt, rv := make([][]float64, len(names)), make([][]float64, len(names))
	for _, s := range rows {
		bal = append(bal, s.Balance)
		if s.MDI > 0 && !math.IsInf(s.MDI, 0) {
			logm = append(logm, math.Log(s.MDI))
		}
		text, vis = append(text, s.Text), append(vis, s.Vision)
		for g := range names {
			rt[g], rv[g] = append(rt[g], s.RangeText[g]), append(rv[g], s.RangeVision[g])
		}
	}
	met["mdi/balance_mean"] = mean(bal)
	met["mdi/mdi_geomean"] = math.Exp(mean(logm)) // MDI is a ratio: its geometric mean
	met["mdi/text_attention_per_token"] = mean(text)
	met["mdi/vision_attention_per_token"] = mean(vis)
	for g, name := range names {
		met["mdi/"+name+"_mdi"] = mean(rt[g]) / mean(rv[g])
	}
	var r []float64
	for _, b := range bal {
		r = append(r, 2*b-1)
	}
	met["mdi/reward_mean"] = mean(r)
}

// writeAttentionDiagnostics appends the step's attention diagnostics to
// attention_diagnostics.md beside rollouts.md: per layer range, the per-token attention on text
// and on vision and their MDI, then the first count responses.
func writeAttentionDiagnostics(runDir string, step, count, layers int, rows []mdiStats, met Metrics) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "## step %d\n\nbalance mean %.3f, MDI (geometric mean) %.3f, MDI reward mean %.3f\n\n",
		step, met["mdi/balance_mean"], met["mdi/mdi_geomean"], met["mdi/reward_mean"])
	b.WriteString("| layers | text attention / token | vision attention / token | MDI |\n|---|---|---|---|\n")
	for g, name := range layerRanges(layers) {
		var tx, vs []float64
		for _, s := range rows {
			tx, vs = append(tx, s.RangeText[g]), append(vs, s.RangeVision[g])
		}
		fmt.Fprintf(&b, "| %s | %.4f | %.4f | %.3f |\n", name, mean(tx), mean(vs), mean(tx)/mean(vs))
	}
	b.WriteString("\n| response | MDI | balance |\n|---|---|---|\n")
	for i, s := range rows[:min(count, len(rows))] {
		fmt.Fprintf(&b, "| %d | %.3f | %.3f |\n", i, s.MDI, s.Balance)
	}
	b.WriteString("\n")
	return appendFile(filepath.Join(runDir, "attention_diagnostics.md"), b.Bytes())
}
