package backendtest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl"
)

// tprlOps: the top-p token selection with its statistics (ties and a NaN score included).
func tprlOps(rows, cols int) []op {
	r := rand.New(rand.NewPCG(uint64(rows)+400, uint64(cols)))
	n := rows * cols
	m := paddedMask(r, rows, cols)
	sc := Randn(r, n, 1)
	for i := 0; i < n; i += 53 {
		sc[i] = 0.25
	}
	sc[n/2] = float32(math.NaN())
	return []op{{"EntropyMask", 1e-6, 1e-7, false, func(t *testing.T, be tensor.Backend) [][]float32 {
		d := newF32(be, rows, cols)
		st, err := tprl.EntropyMask(d, Upload(t, be, sc, rows, cols), Upload(t, be, m, rows, cols), 0.3)
		if err != nil {
			t.Fatal(err)
		}
		return [][]float32{Host(t, d), {float32(st.Valid), float32(st.Selected), st.Threshold, st.SelectedMean, st.RejectedMean}}
	}}}
}
