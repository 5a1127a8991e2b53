package tprl

import (
	"errors"
	"reflect"
	"testing"

	"github.com/mtrl-go/mtrl/internal/hostile"
	"github.com/mtrl-go/mtrl/tensor"
)

// TestEmptyResponses: B responses of zero tokens (T = 0) go through every step: no valid rows,
// factors 1, a zero loss.
func TestEmptyResponses(t *testing.T) {
	const b = 3
	mask := hostile.Ones(b, 0)
	sens := hostile.F32(b)
	st, err := ShapingStatsOf(sens, mask)
	if err != nil || st.Count != 0 {
		t.Fatalf("ShapingStatsOf: %+v, %v", st, err)
	}
	if st, err = ShapingStatsOfScore(hostile.F32(b, 0), mask); err != nil || st.Count != 0 {
		t.Fatalf("ShapingStatsOfScore: %+v, %v", st, err)
	}
	factors := hostile.F32(b)
	rec, err := ShapeAdvantages(ShapingOutputs{Advantages: hostile.F32(b, 0), Factors: factors},
		ShapingInputs{Advantages: hostile.F32(b, 0), Sensitivity: sens, ResponseMask: mask}, ShapingStats{Count: 2, Min: 0, Max: 1, Sum: 1}, ShapingOptions{ScalingMin: 0.8})
	if err != nil || rec.ValidRows != 0 || rec.Rows != b {
		t.Fatalf("ShapeAdvantages: %+v, %v", rec, err)
	}
	if f, _ := factors.Float32s(); f[0] != 1 || f[b-1] != 1 {
		t.Errorf("factors of empty rows %v, want 1", f)
	}
	res, err := allOn().Apply(Batch{ResponseMask: mask, Entropy: hostile.F32(b, 0), OldLogProbs: hostile.F32(b, 0),
		AugLogProbs: hostile.F32(b, 0), Advantages: hostile.F32(b, 0), MicroBatchSize: 2})
	if err != nil {
		t.Fatalf("Config.Apply: %v", err)
	}
	defer res.Release()
	u, err := fullUpdateConfig().Prepare(miniBatch(b, 0))
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	defer u.Release()
	for _, r := range [][2]int{{0, 2}, {2, 3}} {
		m, err := u.MicroBatch(hostile.F32(r[1]-r[0], 0), MicroInputs{LogProbs: hostile.F32(r[1]-r[0], 0), Entropy: hostile.F32(r[1]-r[0], 0)}, r[0], r[1])
		if err != nil {
			t.Fatalf("MicroBatch%v: %v", r, err)
		}
		if m.Loss != 0 {
			t.Errorf("MicroBatch%v: loss %v of no tokens", r, m.Loss)
		}
		m.Release()
	}
}

// TestPrepareChecksEveryTensor: wrong dtypes and foreign backends of the mini-batch's tensors
// are refused by Prepare, naming the field, not later by MicroBatch.
func TestPrepareChecksEveryTensor(t *testing.T) {
	wrong := map[string]func() *tensor.Tensor{
		"bf16":   func() *tensor.Tensor { return tensor.Must(tensor.New(tensor.CPU(), tensor.BFloat16, 2, 3)) },
		"int32":  func() *tensor.Tensor { return tensor.Must(tensor.New(tensor.CPU(), tensor.Int32, 2, 3)) },
		"uint8":  func() *tensor.Tensor { return tensor.Must(tensor.New(tensor.CPU(), tensor.Uint8, 2, 3)) },
		"device": func() *tensor.Tensor { return hostile.OnDevice(hostile.F32(2, 3)) },
	}
	for _, field := range []string{"ResponseMask", "OldLogProbs", "Advantages", "AugLogProbs", "RefLogProbs", "PerceptionScore"} {
		for kind, mk := range wrong {
			mb := miniBatch(2, 3)
			reflect.ValueOf(&mb).Elem().FieldByName(field).Set(reflect.ValueOf(mk()))
			u, err := fullUpdateConfig().Prepare(mb)
			var te *tensor.Error
			if err == nil {
				u.Release()
				t.Errorf("%s %s: Prepare accepted it", field, kind)
				continue
			}
			if !errors.As(err, &te) || te.Op != "tprl.UpdateConfig.Prepare" || !(errors.Is(err, tensor.ErrDType) || errors.Is(err, tensor.ErrBackend)) {
				t.Errorf("%s %s: %v, want a Prepare ErrDType/ErrBackend error", field, kind, err)
			}
		}
	}
}
