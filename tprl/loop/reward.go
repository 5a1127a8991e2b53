package loop

import (
	"fmt"
	"math"
)

// Reward is one reward function with its weight, in the spirit of TRL's reward_funcs: a row's
// reward is the weighted sum of its functions' scores, and each function's mean score is
// logged as reward/<Name> (the weighted sum as reward/overall).
type Reward[P any] struct {
	Name   string
	Weight float64
	// Func returns one score per completion. NaN means "no score" (TRL's None): the row's sum
	// leaves the function out and its reward/<Name> mean skips the row. Func sees every row of
	// the step on every rank, so it must be a deterministic function of its inputs.
	Func func(in RewardInputs[P]) ([]float64, error)
}

// RewardInputs is what a reward function sees: row i is Prompts[i] with Completions[i].
type RewardInputs[P any] struct {
	Step        int
	Prompts     []P
	Completions []Completion
	// Metrics, when a function writes to it, adds its own diagnostics to the step's metrics
	// (name them under the function's name, e.g. "mdi/balance_mean").
	Metrics map[string]float64
}

// validateRewards checks names and weights: unique names, finite weights.
func validateRewards[P any](rs []Reward[P]) error {
	if len(rs) == 0 {
		return fmt.Errorf("loop: no reward functions")
	}
	seen := map[string]bool{"overall": true}
	for i, r := range rs {
		switch {
		case r.Name == "" || seen[r.Name]:
			return fmt.Errorf("loop: reward %d: name %q is empty, repeated or reserved (overall)", i, r.Name)
		case math.IsNaN(r.Weight) || math.IsInf(r.Weight, 0):
			return fmt.Errorf("loop: reward %q: weight %v is not finite", r.Name, r.Weight)
		case r.Func == nil:
			return fmt.Errorf("loop: reward %q: Func is nil", r.Name)
		}
		seen[r.Name] = true
	}
	return nil
}

// scored is the rewards of some rows: per function (NaN: no score) and their weighted sum.
type scored struct {
	parts   map[string][]float64
	overall []float64
	metrics map[string]float64
}

// part returns row i's score named key (a function's name or "overall"); NaN when it has none.
func (s scored) part(key string, i int) float64 {
	if key == "overall" {
		return s.overall[i]
	}
	if p, ok := s.parts[key]; ok {
		return p[i]
	}
	return math.NaN()
}

// scoreRows runs every reward function on the rows and sums them with their weights.
func scoreRows[P any](rs []Reward[P], step int, prompts []P, cs []Completion) (scored, error) {
	s := scored{parts: map[string][]float64{}, overall: make([]float64, len(prompts)), metrics: map[string]float64{}}
	for _, r := range rs {
		v, err := r.Func(RewardInputs[P]{Step: step, Prompts: prompts, Completions: cs, Metrics: s.metrics})
		if err != nil {
			return s, fmt.Errorf("reward %s: %w", r.Name, err)
		}
		if len(v) != len(prompts) {
			return s, fmt.Errorf("reward %s: %d scores for %d completions", r.Name, len(v), len(prompts))
		}
		s.parts[r.Name] = v
		for i, x := range v {
			if !math.IsNaN(x) {
				s.overall[i] += r.Weight * x
			}
		}
	}
	return s, nil
}

// put adds reward/<name> (the mean of the scored rows) and reward/overall to m.
func (s scored) put(m map[string]float64) {
	for name, v := range s.parts {
		var sum float64
		n := 0
		for _, x := range v {
			if !math.IsNaN(x) {
				sum, n = sum+x, n+1
			}
		}
		if n > 0 {
			m["reward/"+name] = sum / float64(n)
		}
	}
	m["reward/overall"] = mean(s.overall)
	for k, v := range s.metrics {
		m[k] = v
	}
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// appendRows appends rows lo..hi of b to a.
func (s *scored) appendRows(b scored, lo, hi int) {
	if s.parts == nil {
		s.parts, s.metrics = map[string][]float64{}, map[string]float64{}
	}
	for k, v := range b.parts {
		s.parts[k] = append(s.parts[k], v[lo:hi]...)
	}
	s.overall = append(s.overall, b.overall[lo:hi]...)
}

// tail returns s without its first n rows.
func (s scored) tail(n int) scored {
	t := scored{parts: map[string][]float64{}, overall: s.overall[n:], metrics: s.metrics}
	for k, v := range s.parts {
		t.parts[k] = v[n:]
	}
	return t
}
