// Package tensortest is the conformance suite every tensor.Backend must pass. A backend runs it
// in one line:
//
//	func TestConformance(t *testing.T) { tensortest.Run(t, mybackend) }
//	func BenchmarkLogProbEntropy(b *testing.B) { tensortest.BenchLogProbEntropy(b, mybackend) }
//
// Every op result on the backend is compared with a float64 reference computed on the host and
// with the CPU backend's result. Sizes straddle warp and block edges; the vocabulary-scale case
// is skipped under -short.
package tensortest

import (
	"bytes"
	"cmp"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

// Sizes around warp (32), block (256) and vocabulary-block (512) edges.
var edgeSizes = []int{0, 1, 31, 32, 33, 255, 256, 257, 511, 513, 1025}

// Run runs the whole conformance suite against backend b.
func Run(t *testing.T, b tensor.Backend) {
	t.Run("Memory", func(t *testing.T) { testMemory(t, b) })
	t.Run("LogProbEntropy", func(t *testing.T) { testLogProbEntropy(t, b) })
	t.Run("LogProbEntropyAdversarial", func(t *testing.T) { testLogProbAdversarial(t, b) })
	t.Run("LogProbEntropyBackward", func(t *testing.T) { testLogProbBackward(t, b) })
	t.Run("Masked", func(t *testing.T) { testMasked(t, b) })
	t.Run("TopPMask", func(t *testing.T) { testTopP(t, b) })
	t.Run("TopPMaskTieBreak", func(t *testing.T) { testTopPTieBreak(t, b) })
	t.Run("Errors", func(t *testing.T) { testErrors(t, b) })
}

// onBackend copies a host tensor to b.
func onBackend(t testing.TB, b tensor.Backend, h *tensor.Tensor) *tensor.Tensor {
	t.Helper()
	d, err := tensor.To(b, h)
	if err != nil {
		t.Fatalf("copy to %s: %v", b.Name(), err)
	}
	return d
}

// toHost copies a backend tensor to host and returns its float32 data.
func hostF32(t testing.TB, d *tensor.Tensor) []float32 {
	t.Helper()
	h, err := tensor.To(tensor.CPU(), d)
	if err != nil {
		t.Fatalf("copy to host: %v", err)
	}
	v, err := h.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func newF32(t testing.TB, b tensor.Backend, shape ...int) *tensor.Tensor {
	t.Helper()
	d, err := tensor.New(b, tensor.Float32, shape...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func randF32(r *rand.Rand, n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64()) * scale
	}
	return v
}

func randMask(r *rand.Rand, n int, p float64) []float32 {
	m := make([]float32, n)
	for i := range m {
		if r.Float64() < p {
			m[i] = 1
		}
	}
	return m
}

func close(got, want, rtol, atol float64) bool {
	if math.IsNaN(want) {
		return math.IsNaN(got)
	}
	if math.IsInf(want, 0) {
		return got == want
	}
	return math.Abs(got-want) <= atol+rtol*math.Abs(want)
}

func compare(t testing.TB, name string, got []float32, want []float64, rtol, atol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d elements, want %d", name, len(got), len(want))
	}
	bad := 0
	for i := range want {
		if !close(float64(got[i]), want[i], rtol, atol) {
			if bad < 3 {
				t.Errorf("%s[%d] = %.9g, want %.9g", name, i, got[i], want[i])
			}
			bad++
		}
	}
	if bad > 3 {
		t.Errorf("%s: %d of %d differ", name, bad, len(want))
	}
}

// compareTerms is compare with the relative tolerance applied to scale[i] (the magnitude of the
// terms want[i] is computed from) instead of |want[i]|; scale[i] >= |want[i]| always.
func compareTerms(t testing.TB, name string, got []float32, want, scale []float64, rtol, atol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d elements, want %d", name, len(got), len(want))
	}
	bad := 0
	for i := range want {
		d := math.Abs(float64(got[i]) - want[i])
		if !(d <= atol+rtol*scale[i]) {
			if bad < 3 {
				t.Errorf("%s[%d] = %.9g, want %.9g (terms %.3g)", name, i, got[i], want[i], scale[i])
			}
			bad++
		}
	}
	if bad > 3 {
		t.Errorf("%s: %d of %d differ", name, bad, len(want))
	}
}

func bitsEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// testOverlappingCopy checks Backend.Copy within one storage: overlapping ranges in either
// direction, and a range onto itself, give what Go's copy gives (the source as it was).
func testOverlappingCopy(t *testing.T, b tensor.Backend) {
	const n = 4099
	orig := make([]byte, n)
	for i := range orig {
		orig[i] = byte(i*131 + i/256)
	}
	for _, c := range []struct{ dst, src, len int }{
		{1, 0, n - 1}, {0, 1, n - 1}, {1000, 37, 3000}, {37, 1000, 3000}, {5, 5, 100}, {0, 2048, 2048},
	} {
		st, err := b.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Upload(st, 0, orig); err != nil {
			t.Fatal(err)
		}
		if err := b.Copy(st, c.dst, st, c.src, c.len); err != nil {
			t.Fatalf("Copy(dst %d, src %d, %d bytes) within one storage: %v", c.dst, c.src, c.len, err)
		}
		got := make([]byte, n)
		if err := b.Download(got, st, 0); err != nil {
			t.Fatal(err)
		}
		want := append([]byte(nil), orig...)
		copy(want[c.dst:c.dst+c.len], want[c.src:c.src+c.len])
		if !bytes.Equal(got, want) {
			t.Errorf("Copy(dst %d, src %d, %d bytes) within one storage differs from Go's copy", c.dst, c.src, c.len)
		}
		if err := st.Release(); err != nil {
			t.Fatal(err)
		}
	}
}

func testMemory(t *testing.T, b tensor.Backend) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range edgeSizes {
		src := randF32(r, n, 1)
		orig := append([]float32(nil), src...)
		h := tensor.Must(tensor.FromFloat32(src, n))
		d := onBackend(t, b, h)
		if d.Backend().Name() != b.Name() {
			t.Fatalf("tensor.To put the tensor on %s, want %s", d.Backend().Name(), b.Name())
		}
		if got := hostF32(t, d); !bitsEqual(got, orig) {
			t.Fatalf("n=%d: round trip changed the data", n)
		}
		if n >= 2 {
			view, err := d.Rows(1, n)
			if err != nil {
				t.Fatal(err)
			}
			if got := hostF32(t, view); !bitsEqual(got, orig[1:]) {
				t.Fatalf("n=%d: Rows view reads the wrong elements", n)
			}
			// Copy back into the view's start from the host; the rest must be untouched.
			if err := tensor.CopyInto(view, tensor.Must(tensor.FromFloat32(make([]float32, n-1)))); err != nil {
				t.Fatal(err)
			}
			got := hostF32(t, d)
			if got[0] != orig[0] || got[n-1] != 0 {
				t.Fatalf("n=%d: writing through a view: got %v..", n, got[:2])
			}
		}
		z := newF32(t, b, n)
		for _, v := range hostF32(t, z) {
			if v != 0 {
				t.Fatalf("n=%d: New is not zero-filled", n)
			}
		}
	}
	testOverlappingCopy(t, b)
	for _, dt := range []tensor.DType{tensor.BFloat16, tensor.Int32, tensor.Uint8} {
		d, err := tensor.New(b, dt, 3, 257)
		if err != nil {
			t.Fatal(err)
		}
		h, err := tensor.To(tensor.CPU(), d)
		if err != nil || h.DType() != dt || h.Len() != 3*257 {
			t.Fatalf("%v: round trip: %v, %v", dt, h, err)
		}
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
}

// refLogProbEntropy is the float64 reference of tensor.LogProbEntropy for one row.
func refLogProbEntropy(x []float32, y int, temp float32) (logp, ent float64) {
	m := math.Inf(-1)
	z := make([]float64, len(x))
	for i, v := range x {
		z[i] = float64(v / temp)
		m = math.Max(m, z[i])
	}
	var s float64
	for _, v := range z {
		s += math.Exp(v - m)
	}
	lse := m + math.Log(s)
	for _, v := range z {
		if p := math.Exp(v - lse); p > 0 {
			ent -= p * (v - lse)
		}
	}
	return math.Max(z[y]-lse, -math.MaxFloat32), ent
}

type lpCase struct {
	n, v  int
	temp  float32
	scale float32
	bf16  bool
}

func runLogProb(t *testing.T, b tensor.Backend, c lpCase, logits []float32, ys []int32) (lp, ent []float32) {
	t.Helper()
	var h *tensor.Tensor
	if c.bf16 {
		bf := make([]tensor.BF16, len(logits))
		for i, v := range logits {
			bf[i] = tensor.BF16FromFloat32(v)
			logits[i] = bf[i].Float32() // the reference sees the rounded values
		}
		h = tensor.Must(tensor.FromBF16(bf, c.n, c.v))
	} else {
		h = tensor.Must(tensor.FromFloat32(logits, c.n, c.v))
	}
	before := append([]float32(nil), logits...)
	dl := onBackend(t, b, h)
	dy := onBackend(t, b, tensor.Must(tensor.FromInt32(ys, c.n)))
	dlp, dent := newF32(t, b, c.n), newF32(t, b, c.n)
	if err := tensor.LogProbEntropy(dlp, dent, dl, dy, c.temp); err != nil {
		t.Fatalf("%+v: %v", c, err)
	}
	if !bitsEqual(logits, before) {
		t.Fatalf("%+v: the input logits changed", c)
	}
	return hostF32(t, dlp), hostF32(t, dent)
}

func testLogProbEntropy(t *testing.T, b tensor.Backend) {
	r := rand.New(rand.NewPCG(3, 4))
	var cases []lpCase
	for _, v := range []int{1, 2, 31, 32, 33, 255, 256, 257, 511, 512, 513, 1025, 4099} {
		for _, n := range []int{1, 3, 33} {
			cases = append(cases, lpCase{n, v, 1, 3, false}, lpCase{n, v, 0.7, 3, v%2 == 1})
		}
	}
	cases = append(cases, lpCase{0, 17, 1, 1, false}, lpCase{7, 1000, 1.3, 30, false}, lpCase{5, 300, 0.5, 150, false})
	if !testing.Short() {
		cases = append(cases, lpCase{4, 151936, 1, 4, false}, lpCase{3, 151936, 0.8, 4, true})
	}
	for _, c := range cases {
		logits := randF32(r, c.n*c.v, c.scale)
		ys := make([]int32, c.n)
		for i := range ys {
			ys[i] = int32(r.IntN(c.v))
		}
		lp, ent := runLogProb(t, b, c, logits, ys)
		wantLP, wantEnt := make([]float64, c.n), make([]float64, c.n)
		for i := range c.n {
			wantLP[i], wantEnt[i] = refLogProbEntropy(logits[i*c.v:(i+1)*c.v], int(ys[i]), c.temp)
		}
		// Absolute error grows with the logit magnitude (float32 z has ulp |z|*6e-8).
		atol := 2e-6 * float64(max(1, c.scale/c.temp)) * 8
		compare(t, "logp", lp, wantLP, 1e-5, atol)
		compare(t, "entropy", ent, wantEnt, 1e-5, atol)

		// Determinism: a second run gives the same bits.
		lp2, ent2 := runLogProb(t, b, c, logits, ys)
		if !bitsEqual(lp, lp2) || !bitsEqual(ent, ent2) {
			t.Fatalf("%+v: two runs differ", c)
		}
		// Cross-check with the CPU backend.
		if b.Name() != tensor.CPU().Name() {
			lpc, entc := runLogProb(t, tensor.CPU(), c, logits, ys)
			compare(t, "logp vs cpu", lp, f64(lpc), 1e-5, atol)
			compare(t, "entropy vs cpu", ent, f64(entc), 1e-5, atol)
		}
	}
}

func f64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func testLogProbAdversarial(t *testing.T, b tensor.Backend) {
	inf := float32(math.Inf(1))
	for _, tc := range []struct {
		name   string
		logits []float32
		y      int32
	}{
		{"V=1", []float32{3}, 0},
		{"all equal", []float32{2, 2, 2, 2, 2, 2, 2, 2}, 5},
		{"huge", []float32{1e4, -1e4, 1e4, 0}, 1},
		{"masked vocabulary", []float32{-inf, 1, -inf, 2, -inf}, 3},
		{"masked target", []float32{-inf, 1, -inf, 2, -inf}, 0},
		{"all masked", []float32{-inf, -inf}, 0},
		{"NaN", []float32{1, float32(math.NaN()), 2}, 0},
	} {
		c := lpCase{1, len(tc.logits), 1, 1, false}
		lp, ent := runLogProb(t, b, c, append([]float32(nil), tc.logits...), []int32{tc.y})
		wlp, went := refLogProbEntropy(tc.logits, int(tc.y), 1)
		if tc.name == "all masked" || tc.name == "NaN" { // documented: no distribution, NaN
			wlp, went = math.NaN(), math.NaN()
		}
		compare(t, tc.name+" logp", lp, []float64{wlp}, 1e-6, 1e-6)
		compare(t, tc.name+" entropy", ent, []float64{went}, 1e-6, 1e-6)
	}
}

func testLogProbBackward(t *testing.T, b tensor.Backend) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, c := range []lpCase{{1, 1, 1, 1, false}, {3, 33, 0.7, 2, false}, {4, 257, 1, 3, false}, {2, 1025, 1.5, 3, true}} {
		logits := randF32(r, c.n*c.v, c.scale)
		ys := make([]int32, c.n)
		for i := range ys {
			ys[i] = int32(r.IntN(c.v))
		}
		lp, ent := runLogProb(t, b, c, logits, ys) // rounds bf16 logits in place
		gl, ge := randF32(r, c.n, 1), randF32(r, c.n, 1)
		dt := tensor.Float32
		if c.bf16 {
			dt = tensor.BFloat16
		}
		var h *tensor.Tensor
		if c.bf16 {
			bf := make([]tensor.BF16, len(logits))
			for i, v := range logits {
				bf[i] = tensor.BF16FromFloat32(v)
			}
			h = tensor.Must(tensor.FromBF16(bf, c.n, c.v))
		} else {
			h = tensor.Must(tensor.FromFloat32(logits, c.n, c.v))
		}
		dl := onBackend(t, b, h)
		dd, err := tensor.New(b, dt, c.n, c.v)
		if err != nil {
			t.Fatal(err)
		}
		up := func(v []float32) *tensor.Tensor { return onBackend(t, b, tensor.Must(tensor.FromFloat32(v, c.n))) }
		err = tensor.LogProbEntropyBackward(dd, tensor.LogProbGrad{
			Logits: dl, Targets: onBackend(t, b, tensor.Must(tensor.FromInt32(ys, c.n))),
			LogProbs: up(lp), Entropy: up(ent), DLogProbs: up(gl), DEntropy: up(ge),
			Temperature: c.temp,
		})
		if err != nil {
			t.Fatal(err)
		}
		got32, err := tensor.To(tensor.CPU(), dd)
		if err != nil {
			t.Fatal(err)
		}
		var got []float32
		if c.bf16 {
			bf, _ := got32.BF16s()
			for _, x := range bf {
				got = append(got, x.Float32())
			}
		} else {
			got, _ = got32.Float32s()
		}
		want := make([]float64, c.n*c.v)
		terms := make([]float64, c.n*c.v)
		for i := range c.n {
			row := i * c.v
			refBackwardRow(want[row:row+c.v], terms[row:row+c.v], logits[row:row+c.v], int(ys[i]), c.temp, float64(gl[i]), float64(ge[i]))
		}
		rtol, atol := 1e-4, 1e-6
		if c.bf16 {
			rtol, atol = 8e-3, 1e-5 // the gradient itself is stored in bfloat16
		}
		compareTerms(t, "dlogits", got, want, terms, rtol, atol)
	}
}

// refBackwardRow is the float64 gradient of gl*logp + ge*entropy with respect to the logits.
// terms receives, per logit, the summed magnitude of the terms the gradient is the difference
// of: (|gl|·(p+[i=y]) + |ge|·p·(|log p|+H))/T. A float32 kernel's rounding error scales with
// those terms, not with their difference, which can cancel to near zero (a device expf within
// 2 ulp of the host's moves such a logit's gradient by more than rtol of the result).
func refBackwardRow(dst, terms []float64, x []float32, y int, temp float32, gl, ge float64) {
	lp := make([]float64, len(x))
	m := math.Inf(-1)
	for i, v := range x {
		lp[i] = float64(v) / float64(temp)
		m = math.Max(m, lp[i])
	}
	var s float64
	for _, v := range lp {
		s += math.Exp(v - m)
	}
	lse := m + math.Log(s)
	var h float64
	for i := range lp {
		lp[i] -= lse
		h -= math.Exp(lp[i]) * lp[i]
	}
	for i := range lp {
		p := math.Exp(lp[i])
		g := -gl*p - ge*p*(lp[i]+h)
		m := math.Abs(gl)*p + math.Abs(ge)*p*(math.Abs(lp[i])+h)
		if i == y {
			g += gl
			m += math.Abs(gl)
		}
		dst[i] = g / float64(temp)
		terms[i] = m / float64(temp)
	}
}

func testMasked(t *testing.T, b tensor.Backend) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, n := range edgeSizes {
		for _, rows := range []int{1, 4} {
			vals, mask := randF32(r, rows*n, 2), randMask(r, rows*n, 0.7)
			origV, origM := append([]float32(nil), vals...), append([]float32(nil), mask...)
			dv := onBackend(t, b, tensor.Must(tensor.FromFloat32(vals, rows, n)))
			dm := onBackend(t, b, tensor.Must(tensor.FromFloat32(mask, rows, n)))
			var s, c float64
			for i := range vals {
				s += float64(vals[i]) * float64(mask[i])
				c += float64(mask[i])
			}
			mean, err := tensor.MaskedMean(dv, dm)
			if err != nil {
				t.Fatal(err)
			}
			// In float32, c + 1e-8 == c for any c >= 1: the epsilon only turns 0/0 into 0.
			wantMean := s / math.Max(c, 1)
			compare(t, "MaskedMean", []float32{mean}, []float64{wantMean}, 1e-5, 1e-6)
			var ss float64
			for i := range vals {
				d := float64(vals[i]) - wantMean
				ss += d * d * float64(mask[i])
			}
			wantVar := ss / math.Max(c, 1)
			if c > 1 {
				wantVar *= c / (c - 1)
			}
			v, err := tensor.MaskedVar(dv, dm, true)
			if err != nil {
				t.Fatal(err)
			}
			compare(t, "MaskedVar", []float32{v}, []float64{wantVar}, 1e-4, 1e-6)

			rowMeans := newF32(t, b, rows)
			if err := tensor.MaskedMeanRows(rowMeans, dv, dm); err != nil {
				t.Fatal(err)
			}
			want := make([]float64, rows)
			for i := range rows {
				var rs, rc float64
				for j := i * n; j < (i+1)*n; j++ {
					rs += float64(vals[j]) * float64(mask[j])
					rc += float64(mask[j])
				}
				want[i] = rs / math.Max(rc, 1)
			}
			compare(t, "MaskedMeanRows", hostF32(t, rowMeans), want, 1e-5, 1e-6)

			wh := newF32(t, b, rows, n)
			if err := tensor.MaskedWhiten(wh, dv, dm); err != nil {
				t.Fatal(err)
			}
			wantW := make([]float64, rows*n)
			for i := range wantW {
				wantW[i] = (float64(vals[i]) - wantMean) / math.Sqrt(wantVar+1e-8)
			}
			compare(t, "MaskedWhiten", hostF32(t, wh), wantW, 1e-4, 1e-4)
			if !bitsEqual(hostF32(t, dv), origV) || !bitsEqual(hostF32(t, dm), origM) {
				t.Fatal("masked ops changed their inputs")
			}
		}
	}
}

func testTopP(t *testing.T, b tensor.Backend) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, n := range edgeSizes {
		for _, p := range []float32{0, 0.2, 0.3, 0.6, 1} {
			rows := 3
			scores, mask := randF32(r, rows*n, 1), randMask(r, rows*n, 0.8)
			if n > 4 { // plant ties: the lower index must win
				scores[1], scores[2], scores[3] = 5, 5, 5
			}
			ds := onBackend(t, b, tensor.Must(tensor.FromFloat32(scores, rows, n)))
			dm := onBackend(t, b, tensor.Must(tensor.FromFloat32(mask, rows, n)))
			dst := newF32(t, b, rows, n)
			if err := tensor.TopPMask(dst, ds, dm, p); err != nil {
				t.Fatal(err)
			}
			sel := hostF32(t, dst)
			for i := range rows {
				row, mrow, srow := sel[i*n:(i+1)*n], mask[i*n:(i+1)*n], scores[i*n:(i+1)*n]
				valid := 0
				for _, w := range mrow {
					if w != 0 {
						valid++
					}
				}
				wantK := tensor.TopPCount(valid, p)
				// Every selected score beats (or ties at a higher index) every unselected valid one.
				count := 0
				for a := range n {
					if row[a] == 0 {
						continue
					}
					count++
					if mrow[a] == 0 {
						t.Fatalf("n=%d: selected a masked position", n)
					}
					for c := range n {
						if mrow[c] != 0 && row[c] == 0 && (srow[c] > srow[a] || (srow[c] == srow[a] && c < a)) {
							t.Fatalf("n=%d p=%v: position %d selected over %d", n, p, a, c)
						}
					}
				}
				if count != wantK {
					t.Fatalf("n=%d p=%v: %d selected, want %d", n, p, count, wantK)
				}
			}
		}
	}
}

// testTopPTieBreak checks TopPMaskTieBreak against its definition: a stable descending sort by
// (score, tiebreak), the first TopPCount(valid, p) kept. Scores take few values so most
// thresholds are ties.
func testTopPTieBreak(t *testing.T, b tensor.Backend) {
	r := rand.New(rand.NewPCG(19, 20))
	for _, n := range edgeSizes {
		for _, p := range []float32{0, 0.3, 0.6, 1} {
			rows := 3
			scores, mask := make([]float32, rows*n), randMask(r, rows*n, 0.8)
			tb := make([]float32, rows*n)
			for i := range scores {
				scores[i] = float32(r.IntN(3))
				tb[i] = float32(r.IntN(4))
			}
			dst := newF32(t, b, rows, n)
			up := func(v []float32) *tensor.Tensor { return onBackend(t, b, tensor.Must(tensor.FromFloat32(v, rows, n))) }
			if err := tensor.TopPMaskTieBreak(dst, up(scores), up(tb), up(mask), p); err != nil {
				t.Fatal(err)
			}
			got := hostF32(t, dst)
			for i := range rows {
				lo, hi := i*n, (i+1)*n
				var idx []int
				for c := lo; c < hi; c++ {
					if mask[c] != 0 {
						idx = append(idx, c)
					}
				}
				slices.SortStableFunc(idx, func(a, c int) int {
					if d := cmp.Compare(scores[c], scores[a]); d != 0 {
						return d
					}
					return cmp.Compare(tb[c], tb[a])
				})
				want := make([]float32, n)
				for _, c := range idx[:tensor.TopPCount(len(idx), p)] {
					want[c-lo] = 1
				}
				if !slices.Equal(got[lo:hi], want) {
					t.Fatalf("n=%d p=%v row %d: got %v, want %v", n, p, i, got[lo:hi], want)
				}
			}
		}
	}
}

func testErrors(t *testing.T, b tensor.Backend) {
	logits := newF32(t, b, 2, 5)
	ys := onBackend(t, b, tensor.Must(tensor.FromInt32([]int32{0, 9}, 2)))
	lp := newF32(t, b, 2)
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"target out of range", tensor.LogProbs(lp, logits, ys, 1), tensor.ErrParam},
		{"temperature 0", tensor.LogProbs(lp, logits, ys, 0), tensor.ErrParam},
		{"wrong logp shape", tensor.LogProbs(newF32(t, b, 3), logits, ys, 1), tensor.ErrShape},
		{"mask shape", func() error { _, err := tensor.MaskedMean(logits, newF32(t, b, 5, 2)); return err }(), tensor.ErrShape},
		{"top_p 1.5", tensor.TopPMask(newF32(t, b, 2, 5), logits, newF32(t, b, 2, 5), 1.5), tensor.ErrParam},
		{"mixed backends", func() error {
			_, err := tensor.MaskedMean(logits, tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 2, 5)))
			if b.Name() == tensor.CPU().Name() {
				return tensor.ErrBackend // nothing to mix on the CPU backend
			}
			return err
		}(), tensor.ErrBackend},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: got %v, want an error wrapping %v", tc.name, tc.err, tc.want)
		}
	}
}
