package tensor_test

import (
	"encoding/binary"
	"errors"
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
// (up to rounding); every target in range is accepted and out-of-range ones are errors; the
// same logits in bfloat16 are accepted, and the backward of both is finite.
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
		// The same logits in bfloat16 are accepted too, and the backward of both gives finite
		// gradients of the logits' shape.
		b16 := make([]tensor.BF16, n)
		for i, x := range logits {
			b16[i] = tensor.BF16FromFloat32(x)
		}
		lb := tensor.Must(tensor.FromBF16(b16, rows, v))
		lp16, ent16 := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, rows)), tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, rows))
		if err := tensor.LogProbEntropy(lp16, ent16, lb, tensor.Must(tensor.FromInt32(ys, rows)), temp); err != nil {
			t.Fatalf("bfloat16 logits: %v", err)
		}
		ones := make([]float32, rows)
		for i := range ones {
			ones[i] = 1
		}
		for _, in := range []struct {
			logits, lp, ent *tensor.Tensor
		}{{tensor.Must(tensor.FromFloat32(logits, rows, v)), lp, ent}, {lb, lp16, ent16}} {
			d := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, rows, v))
			err := tensor.LogProbEntropyBackward(d, tensor.LogProbGrad{Logits: in.logits, Targets: tensor.Must(tensor.FromInt32(ys, rows)),
				LogProbs: in.lp, Entropy: in.ent, DLogProbs: tensor.Must(tensor.FromFloat32(ones, rows)),
				DEntropy: tensor.Must(tensor.FromFloat32(ones, rows)), Temperature: temp})
			if err != nil {
				t.Fatalf("backward (%v logits): %v", in.logits.DType(), err)
			}
			g, _ := d.Float32s()
			for i, x := range g {
				if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
					t.Fatalf("backward (%v logits): dlogits[%d] = %v", in.logits.DType(), i, x)
				}
			}
		}
	})
}

// FuzzNewReshapeViews: any dimensions, dtype, reshape and row range either fail with a
// *tensor.Error or give a tensor whose element count, storage and views agree. Shapes whose
// storage would exceed 64 KiB are only tried where they must fail (overflow, beyond
// MaxHostBytes), so the target never allocates much.
func FuzzNewReshapeViews(f *testing.F) {
	f.Add(uint8(1), 2, 3, 4, 6, -1, 0, 1)
	f.Add(uint8(4), 1<<62+1, 1, 1, 1, 1, 0, 0)
	f.Add(uint8(3), 1<<31, 1<<31, 1, 0, 0, 0, 0)
	f.Add(uint8(4), math.MaxInt, 1, 1, 0, 0, 0, 0)
	f.Add(uint8(1), 0, 5, 0, 1<<32, 1<<32, 0, 0)
	f.Add(uint8(2), 3, 0, 7, -1, 0, 2, 1)
	f.Add(uint8(9), 1, 1, 1, 1, 1, 0, 1)
	f.Fuzz(func(t *testing.T, dt uint8, d0, d1, d2, r0, r1, lo, hi int) {
		dtype := tensor.DType(dt % 6)
		dims := []int{d0, d1, d2}
		n, sizeErr := tensor.CheckSize("", "", dims...)
		fits := sizeErr == nil && dtype.Size() > 0 && n <= tensor.MaxHostBytes/dtype.Size()
		if fits && n*dtype.Size() > 1<<16 {
			return
		}
		x, err := tensor.New(tensor.CPU(), dtype, dims...)
		if !fits {
			if err == nil {
				t.Fatalf("New(%v, %v) accepted %d elements", dtype, dims, x.Len())
			}
			checkTensorError(t, err)
			return
		}
		if err != nil {
			t.Fatalf("New(%v, %v): %v", dtype, dims, err)
		}
		st, off := x.Storage()
		if x.Len() != n || off != 0 || st.Len() != n*dtype.Size() {
			t.Fatalf("New(%v, %v): Len %d, storage %d bytes", dtype, dims, x.Len(), st.Len())
		}
		if r, err := x.Reshape(r0, r1); err != nil {
			checkTensorError(t, err)
		} else if m, err := tensor.CheckSize("", "", r.Shape()...); err != nil || m != n || r.Len() != n {
			t.Fatalf("Reshape(%d, %d) of %v gave %v", r0, r1, dims, r.Shape())
		}
		v, err := x.Rows(lo, hi)
		if err != nil {
			checkTensorError(t, err)
			return
		}
		if want := (hi - lo) * d1 * d2; v.Len() != want {
			t.Fatalf("Rows(%d, %d) of %v has %d elements, want %d", lo, hi, dims, v.Len(), want)
		}
		if _, err := tensor.To(tensor.CPU(), v); err != nil {
			t.Fatalf("To of a view: %v", err)
		}
		buf := make([]byte, 4)
		if err := tensor.CPU().Download(buf, st, lo); (err == nil) != (lo >= 0 && lo <= st.Len()-4) {
			t.Fatalf("Download of 4 bytes at %d from %d bytes: %v", lo, st.Len(), err)
		}
	})
}

func checkTensorError(t *testing.T, err error) {
	t.Helper()
	var te *tensor.Error
	if !errors.As(err, &te) {
		t.Fatalf("%v is not a *tensor.Error", err)
	}
}
