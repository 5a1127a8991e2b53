package tensor_test

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

// FuzzReshapeRows: any shape request either fails with a wrapped sentinel or yields a view with
// the same elements; Rows views read the right elements. Never a panic.
func FuzzReshapeRows(f *testing.F) {
	f.Add(12, 3, -1, 1, 2)
	f.Add(0, 0, -1, 0, 0)
	f.Add(7, -1, -1, 3, 9)
	f.Fuzz(func(t *testing.T, n, d0, d1, lo, hi int) {
		if n < 0 || n > 1<<12 {
			return
		}
		data := make([]float32, n)
		for i := range data {
			data[i] = float32(i)
		}
		x := tensor.Must(tensor.FromFloat32(data, n))
		r, err := x.Reshape(d0, d1)
		if err != nil {
			return
		}
		if r.Len() != n || r.Dim(0)*r.Dim(1) != n {
			t.Fatalf("Reshape(%d, %d) of %d elements gave %v", d0, d1, n, r.Shape())
		}
		v, err := r.Rows(lo, hi)
		if err != nil {
			return
		}
		got, _ := v.Float32s()
		cols := r.Dim(1)
		for i, g := range got {
			if g != float32(lo*cols+i) {
				t.Fatalf("Rows(%d, %d)[%d] = %v", lo, hi, i, g)
			}
		}
	})
}

// FuzzResponseMask: the mask is 1 exactly up to and including the first EOS of each row.
func FuzzResponseMask(f *testing.F) {
	f.Add([]byte{1, 2, 3, 2, 5, 6}, 3, int32(2))
	f.Add([]byte{}, 1, int32(0))
	f.Fuzz(func(t *testing.T, raw []byte, cols int, eos int32) {
		if cols <= 0 || cols > 64 || len(raw)%cols != 0 {
			return
		}
		ids := make([]int32, len(raw))
		for i, b := range raw {
			ids[i] = int32(b % 8)
		}
		rows := len(ids) / cols
		m := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, rows, cols))
		if err := tensor.ResponseMask(m, tensor.Must(tensor.FromInt32(ids, rows, cols)), eos); err != nil {
			t.Fatal(err)
		}
		mv, _ := m.Float32s()
		for r := range rows {
			ended := false
			for c := range cols {
				want := float32(1)
				if ended {
					want = 0
				}
				if mv[r*cols+c] != want {
					t.Fatalf("row %d col %d: mask %v, want %v (ids %v)", r, c, mv[r*cols+c], want, ids[r*cols:(r+1)*cols])
				}
				ended = ended || ids[r*cols+c] == eos
			}
		}
	})
}

// FuzzLogProbEntropy: for finite logits, log-probs are <= 0 and entropies lie in [0, ln V]
// (up to rounding); every target in range is accepted and out-of-range ones are errors.
func FuzzLogProbEntropy(f *testing.F) {
	f.Add([]byte{0, 0, 128, 63, 0, 0, 0, 64}, 2, int32(1), float32(1))
	f.Add([]byte{0, 0, 128, 255, 0, 0, 128, 127, 0, 0, 0, 0}, 3, int32(0), float32(0.5))
	f.Fuzz(func(t *testing.T, raw []byte, v int, target int32, temp float32) {
		n := len(raw) / 4
		if v <= 0 || v > 4096 || n == 0 || n%v != 0 {
			return
		}
		logits := make([]float32, n)
		for i := range logits {
			logits[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			if math.IsNaN(float64(logits[i])) || math.IsInf(float64(logits[i]), 0) || math.Abs(float64(logits[i])) > 1e4 {
				return // non-finite rows are documented to give NaN; covered by the conformance suite
			}
		}
		rows := n / v
		ys := make([]int32, rows)
		for i := range ys {
			ys[i] = target
		}
		lp, ent := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, rows)), tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, rows))
		err := tensor.LogProbEntropy(lp, ent, tensor.Must(tensor.FromFloat32(logits, rows, v)), tensor.Must(tensor.FromInt32(ys, rows)), temp)
		validTemp := temp > 0 && !math.IsInf(float64(temp), 0) && temp >= 1e-3
		switch {
		case target < 0 || int(target) >= v || !(temp > 0) || math.IsInf(float64(temp), 0):
			if err == nil {
				t.Fatalf("target %d of V=%d, temperature %v: no error", target, v, temp)
			}
			return
		case err != nil:
			t.Fatal(err)
		case !validTemp:
			return // tiny temperatures overflow z = x/T; the values are documented only for finite z
		}
		l, _ := lp.Float32s()
		e, _ := ent.Float32s()
		for i := range rows {
			if !(l[i] <= 1e-5) || !(e[i] >= -1e-5) || !(float64(e[i]) <= math.Log(float64(v))+1e-4) {
				t.Fatalf("row %d: logp %v entropy %v (V=%d)", i, l[i], e[i], v)
			}
		}
	})
}
