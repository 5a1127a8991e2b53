package loop_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// TestHostileInputs: the exported functions return errors (or their documented result) for
// nil, zero-value and out-of-range arguments; none panics.
func TestHostileInputs(t *testing.T) {
	s := newSetup()
	pol := loop.FromLogits[prompt](s.model)
	b := &loop.Batch[prompt]{Prompts: s.data.Items[:2], Completions: []loop.Completion{{Tokens: []int32{1}}, {}}, IDs: []uint64{0, 1}, T: respLen, Temperature: 1}
	logp := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 2, respLen))
	bf := tensor.Must(tensor.New(tensor.CPU(), tensor.BFloat16, 2, respLen))
	calls := map[string]func() error{
		"New zero":             func() error { _, err := loop.New(loop.Config{}, loop.Parts[prompt]{}); return err },
		"New zero parts":       func() error { _, err := loop.New(s.cfg, loop.Parts[prompt]{}); return err },
		"Step nil":             func() error { var l *loop.Loop[prompt]; _, err := l.Step(context.Background()); return err },
		"FromLogits nil":       func() error { return errIf(loop.FromLogits[prompt](nil) == nil) },
		"LogProbs nil batch":   func() error { return pol.LogProbs(nil, 0, 1, loop.Input{}, logp, nil) },
		"LogProbs bad rows":    func() error { return pol.LogProbs(b, 1, 5, loop.Input{}, logp, nil) },
		"LogProbs empty rows":  func() error { return pol.LogProbs(b, 1, 1, loop.Input{}, logp, nil) },
		"LogProbs nil logp":    func() error { return pol.LogProbs(b, 0, 2, loop.Input{}, nil, nil) },
		"LogProbs bf16 logp":   func() error { return pol.LogProbs(b, 0, 2, loop.Input{}, bf, nil) },
		"LogProbs zero tensor": func() error { return pol.LogProbs(b, 0, 2, loop.Input{}, &tensor.Tensor{}, nil) },
		"Forward short ids": func() error {
			_, err := pol.Forward(&loop.Batch[prompt]{Prompts: b.Prompts, Completions: b.Completions, T: respLen, Temperature: 1}, 0, 2, logp, nil)
			return err
		},
		"HostGradients nil":  func() error { _, err := loop.NewHostGradients(nil); return err },
		"HostGradients zero": func() error { _, err := loop.NewHostGradients([]loop.Param{{}}); return err },
		"HostAdamW zero":     func() error { _, err := loop.NewHostAdamW([]loop.Param{{Name: "w"}}, 0.9, 0.999, 1e-8, 0); return err },
		"HostAdamW no state": func() error { _, err := (&loop.HostAdamW{}).Step(1, 1); return err },
		"AdamW mismatch":     func() error { return loop.NewAdamW([]int{2}, 0.9, 0.999, 1e-8, 0).Update(nil, nil, nil, 1) },
		"Seek negative":      func() error { return s.data.Seek(-1, 0) },
		"Schedule NaN":       func() error { return loop.Schedule{LR: math.NaN()}.Validate() },
		"Restore negative":   func() error { l, _ := loop.New(s.cfg, s.parts(nil)); return l.Restore(loop.State{Step: -1}) },
		"ScheduleKind parse": func() error { _, err := loop.ParseScheduleKind("warp"); return err },
		"Epochs Next(-1)":    func() error { return errIf(s.data.Next(-1) == nil) },
		"Epochs empty Next":  func() error { return errIf(loop.NewEpochs[prompt](nil, true, 1).Next(3) == nil) },
		"Release nil result": func() error { var r *loop.StepResult[prompt]; r.Release(); return errFake },
		"ClipGradNorm empty": func() error { return errIf(loop.ClipGradNorm(nil, 1) == 0) },
		"Schedule At zero":   func() error { return errIf(loop.Schedule{}.At(0, 0) == 0) },
		"Bucketed zero": func() error {
			_, err := loop.NewBucketedGradients([]loop.Param{{}}, loop.ReduceConfig{}, 0, 1)
			return err
		},
		"Bucketed no collect": func() error {
			g, err := loop.NewBucketedGradients(s.model.Params(), loop.ReduceConfig{}, 0, 1)
			if err != nil {
				return nil
			}
			_, err = g.Reduce(context.Background(), nil, 1)
			return err
		},
		"Sharded zero": func() error {
			_, _, err := loop.NewShardedAdamW([]loop.Param{{Name: "w"}}, loop.ShardGradients, loop.ReduceConfig{}, 0, 1, 0.9, 0.999, 1e-8, 0)
			return err
		},
		"Config validate NaN": func() error { c := s.cfg; c.MaxGradNorm = math.NaN(); return c.Validate() },
	}
	for name, call := range calls {
		assert.NotPanics(t, func() {
			err := call()
			assert.Error(t, err, name)
		}, name)
	}
}

// errFake stands for the documented non-error results checked by the calls above.
var errFake = assert.AnError

// errIf returns errFake when the documented result holds, so every call reports an error.
func errIf(ok bool) error {
	if ok {
		return errFake
	}
	return nil
}
