package tensor

import (
	"math"
	"sync"

	"github.com/mtrl-go/mtrl/internal/gemm"
	"github.com/mtrl-go/mtrl/internal/nnref"
	"github.com/mtrl-go/mtrl/internal/parallel"
)

// LMHeadInputs are the inputs of the fused LM head: hidden states, the head weight, targets and
// the sampling temperature.
type LMHeadInputs struct {
	Hidden  *Tensor       // [..., D], float32 or bfloat16
	Weight  *PackedWeight // [V, D] (lm_head.weight), float32 or bfloat16
	Targets *Tensor       // int32, Hidden's shape without D; each in [0, V)
	// Temperature divides the logits, > 0 (1 for none).
	Temperature float32
}

// LMHeadKernel is implemented by backends with their own fused LM head.
type LMHeadKernel interface {
	LMHeadLogProbs(logp, entropy *Tensor, in LMHeadInputs) error
	LMHeadBackward(dhidden, dweight *Tensor, in LMHeadGrad) error
}

// LMHeadLogProbs writes what LogProbEntropy would write for logits = Hidden·Weightᵀ — the
// log-probability of each target and the entropy of softmax(logits/Temperature), float32, shaped
// like Targets — without ever holding the [N, V] logits: the kernel computes them in tiles of
// 256 rows by 256 vocabulary entries, in parallel over the vocabulary, reduces each tile to
// per-row maxima and sums of exponentials and merges those per row (as Liger's fused linear
// cross-entropy avoids the logits). Logits are summed in float32 (with bfloat16 hidden states
// and weight on a CPU with AVX512_BF16, on VDPBF16PS: exact products, half the weight bytes);
// the softmax sums are float64 across tiles. Besides its tiles it holds 24 bytes per row and 256
// vocabulary entries.
func LMHeadLogProbs(logp, entropy *Tensor, in LMHeadInputs) error {
	const op = "tensor.LMHeadLogProbs"
	if err := checkLMHead(op, in, []*Tensor{logp, entropy}, []string{"logp", "entropy"}); err != nil {
		return err
	}
	if k, ok := KernelOf[LMHeadKernel](logp.Backend()); ok {
		return k.LMHeadLogProbs(logp, entropy, in)
	}
	n, d, v := rowsOf(in.Hidden), in.Hidden.Dim(-1), in.Weight.w.Dim(0)
	return OnHost(2, []*Tensor{logp, entropy, in.Hidden, in.Weight.w, in.Targets}, func(h []*Tensor) error {
		nnref.LMHead(n, v, lmKernels(in.Weight, d, h[2], h[3], nil), hostI32(h[4]), in.Temperature, hostF32(h[0]), hostF32(h[1]))
		return nil
	})
}

// lmKernels returns the LM head's products: through the packed GEMM when the weight has the CPU
// layout and a vector implementation is selected, else the reference's. The logits run on the
// bfloat16 kernels (VDPBF16PS) when hidden states and weight are both bfloat16 and the CPU has
// AVX512_BF16. A backward also packs the hidden states' transpose for dweight (unless the head
// is frozen) and gets Wᵀ one vocabulary chunk at a time (BeginChunk), never the whole [D, V];
// with a bfloat16-rounded logits gradient and bfloat16 inputs, both in bfloat16 pairs.
func lmKernels(w *PackedWeight, d int, hidden, weight *Tensor, bwd *lmBackward) nnref.LMKernels[float32] {
	hp, ok := gemmOf(w)
	if !ok {
		return nnref.RefKernels[float32]{D: d, H: hostF32(hidden), W: w.hostValues(weight)}
	}
	g := &cpuLMKernels{d: d, w: weight}
	if w.dropped { // Wᵀ's chunks come from the panels
		g.src = hp.fwd
	}
	if pb := hp.pairs(hidden); pb != nil {
		g.hb, _ = hidden.BF16s()
		g.fwdB = pb
	} else {
		g.h = hostF32(hidden)
		g.fwd = hp.forward(weight)
	}
	if bwd == nil {
		return g
	}
	g.gradB = bwd.gradBF16 && g.fwdB != nil
	switch {
	case !bwd.dweight:
	case g.gradB:
		g.hTb = gemm.PackTBF16(rowsOf(hidden), d, g.hb)
	case g.hb != nil:
		g.hT = gemm.PackTInto(nil, rowsOf(hidden), d, g.hb)
	default:
		g.hT = gemm.PackTF32(rowsOf(hidden), d, hostF32(hidden))
	}
	return g
}

// lmBackward is what a backward asks of lmKernels: dweight too (not a frozen head), and the
// bfloat16 products of a bfloat16-rounded logits gradient.
type lmBackward struct{ dweight, gradBF16 bool }

// cpuLMKernels are the LM head's tile kernels on the CPU: the products on internal/gemm (logits
// through W's panels, float32 or bfloat16 pairs; dh through the current vocabulary chunk of Wᵀ;
// dw through the transposed hidden states), the fold and the gradient rows on the log-prob
// family's vector loops (float32 sums per row of a tile, as LogProbEntropy's blocks).
type cpuLMKernels struct {
	d       int
	h       []float32 // float32 hidden states when the logits run on fwd
	hb      []BF16    // bfloat16 hidden states when they run on fwdB
	w       *Tensor   // the head weight [V, D], host
	fwd     *gemm.Packed
	fwdB    *gemm.PackedBF16
	hT      *gemm.Packed // hidden states' transpose, for dw (nil for a frozen head)
	wT      *gemm.Packed // Wᵀ of the vocabulary chunk BeginChunk named
	wT0     int          // its first vocabulary row
	src     *gemm.Packed // W's panels when the weight dropped its values (DropValues)
	scratch sync.Pool    // *[]float32: transposed gradients and partial panels

	// With a bfloat16-rounded logits gradient (LMHeadGrad.GradBF16) and bfloat16 inputs, the
	// backward's products run on VDPBF16PS: Wᵀ's chunk and the hidden states' transpose in
	// bfloat16 pairs, the gradient's bits (exactly bfloat16 already) in scratch16.
	gradB     bool
	wTb, hTb  *gemm.PackedBF16
	scratch16 sync.Pool // *[]uint16
}

// bits16 returns the upper halves of x's float32 bits (exact for bfloat16 values) in a
// pooled buffer of len(x), transposed to [cols, rows] when rows > 0.
func (g *cpuLMKernels) bits16(x []float32, rows, cols int) *[]uint16 {
	b, _ := g.scratch16.Get().(*[]uint16)
	if b == nil || cap(*b) < len(x) {
		s := make([]uint16, len(x))
		b = &s
	}
	*b = (*b)[:len(x)]
	out := *b
	if rows == 0 {
		for i, v := range x {
			out[i] = uint16(math.Float32bits(v) >> 16)
		}
		return b
	}
	parallel.For(cols, 64, func(j0, j1 int) {
		for r := range rows {
			for j, v := range x[r*cols+j0 : r*cols+j1] {
				out[(j0+j)*rows+r] = uint16(math.Float32bits(v) >> 16)
			}
		}
	})
	return b
}

// buffer returns a scratch slice of n float32 from the pool; put it back with g.scratch.Put.
func (g *cpuLMKernels) buffer(n int) *[]float32 {
	b, _ := g.scratch.Get().(*[]float32)
	if b == nil || cap(*b) < n {
		s := make([]float32, n)
		b = &s
	}
	*b = (*b)[:n]
	return b
}

// logits is MulRange of the hidden rows [lo, hi) and vocabulary rows [c0, c1) (c0 on a panel),
// on the bfloat16 kernels when they apply.
func (g *cpuLMKernels) logits(lo, hi, c0, c1 int, z []float32, ldz int) {
	if g.fwdB != nil {
		gemm.MulRangeBF16(hi-lo, g.hb[lo*g.d:], g.d, g.fwdB, c0, c1, 0, g.d, z, ldz, false)
		return
	}
	gemm.MulRange(hi-lo, g.h[lo*g.d:], g.d, g.fwd, c0, c1, 0, g.d, z, ldz, false)
}

func (g *cpuLMKernels) Logits(lo, hi, c0, c1 int, z []float32) {
	if c0%gemm.Panel == 0 {
		g.logits(lo, hi, c0, c1, z, c1-c0)
		return
	}
	// A tile that starts inside a panel (the target logit of the backward): the whole panel.
	q0 := c0 / gemm.Panel * gemm.Panel
	q1 := min(q0+gemm.Panel, g.w.Dim(0))
	buf := g.buffer((hi - lo) * (q1 - q0))
	defer g.scratch.Put(buf)
	tmp := *buf
	g.logits(lo, hi, q0, q1, tmp, q1-q0)
	for r := range hi - lo {
		copy(z[r*(c1-c0):(r+1)*(c1-c0)], tmp[r*(q1-q0)+c0-q0:])
	}
}

// BeginChunk packs Wᵀ's vocabulary rows [c0, c1) into the one reused buffer, from the weight
// itself (float32, or bfloat16 widened): the backward never holds a [D, V] copy.
func (g *cpuLMKernels) BeginChunk(c0, c1 int) {
	d := g.d
	g.wT0 = c0
	if g.gradB {
		b, _ := g.w.BF16s()
		g.wTb = gemm.PackTBF16Into(g.wTb, c1-c0, d, b[c0*d:c1*d])
		return
	}
	if g.src != nil {
		g.wT = gemm.TransposeInto(g.wT, g.src, c0, c1)
	} else if v, err := g.w.Float32s(); err == nil {
		g.wT = gemm.PackTInto(g.wT, c1-c0, d, v[c0*d:c1*d])
	} else {
		b, _ := g.w.BF16s()
		g.wT = gemm.PackTInto(g.wT, c1-c0, d, b[c0*d:c1*d])
	}
}

func (g *cpuLMKernels) AddDHidden(lo, hi, c0, c1 int, dz, dh []float32) {
	if g.gradB {
		b := g.bits16(dz[:(hi-lo)*(c1-c0)], 0, 0)
		defer g.scratch16.Put(b)
		gemm.MulRangeBF16(hi-lo, *b, c1-c0, g.wTb, 0, g.d, c0-g.wT0, c1-g.wT0, dh[lo*g.d:], g.d, true)
		return
	}
	gemm.MulRange(hi-lo, dz, c1-c0, g.wT, 0, g.d, c0-g.wT0, c1-g.wT0, dh[lo*g.d:], g.d, true)
}

// AddDWeight transposes dz (in parallel over its columns) and multiplies it by the hidden
// states' panels, in parallel over groups of panels of D.
func (g *cpuLMKernels) AddDWeight(lo, hi, c0, c1 int, dz, dw []float32) {
	rb, vc := hi-lo, c1-c0
	np := (g.d + gemm.Panel - 1) / gemm.Panel
	if g.gradB {
		b := g.bits16(dz[:rb*vc], rb, vc)
		defer g.scratch16.Put(b)
		parallel.For(np, 1, func(q0, q1 int) {
			n0, n1 := q0*gemm.Panel, min(q1*gemm.Panel, g.d)
			gemm.MulRangeBF16(vc, *b, rb, g.hTb, n0, n1, lo, hi, dw[c0*g.d+n0:], g.d, true)
		})
		return
	}
	buf := g.buffer(vc * rb)
	defer g.scratch.Put(buf)
	dzT := *buf
	parallel.For(vc, 64, func(j0, j1 int) {
		for r := range rb {
			for j, x := range dz[r*vc+j0 : r*vc+j1] {
				dzT[(j0+j)*rb+r] = x
			}
		}
	})
	parallel.For(np, 1, func(q0, q1 int) {
		n0, n1 := q0*gemm.Panel, min(q1*gemm.Panel, g.d)
		gemm.MulRange(vc, dzT, rb, g.hT, n0, n1, lo, hi, dw[c0*g.d+n0:], g.d, true)
	})
}

// checkLMHead validates in and the row tensors rows (float32, Targets' shape; the required ones
// first: all of them unless nil is allowed by the caller's own check).
func checkLMHead(op string, in LMHeadInputs, rows []*Tensor, names []string) error {
	if in.Weight == nil || in.Weight.w == nil {
		return Errorf(ErrShape, op, "Weight", "is nil (make it with PackWeight)")
	}
	if err := checkNonNil(op, []string{"Hidden", "Targets"}, in.Hidden, in.Targets); err != nil {
		return err
	}
	if err := CheckDType(op, "Hidden", in.Hidden, Float32, BFloat16); err != nil {
		return err
	}
	if err := CheckDType(op, "Targets", in.Targets, Int32); err != nil {
		return err
	}
	w := in.Weight.w
	if in.Hidden.Rank() < 1 || in.Hidden.Dim(-1) != w.Dim(1) {
		return Errorf(ErrShape, op, "Hidden", "has shape %v, want [..., %d] (the weight is %v)", in.Hidden.shape, w.Dim(1), w.shape)
	}
	if w.Dim(0) == 0 {
		return Errorf(ErrShape, op, "Weight", "has an empty vocabulary")
	}
	rowShape := in.Hidden.shape[:in.Hidden.Rank()-1]
	if !in.Targets.shape.Equal(rowShape) {
		return Errorf(ErrShape, op, "Targets", "has shape %v, want %v (Hidden without D)", in.Targets.shape, rowShape)
	}
	for i, t := range rows {
		if t != nil && !t.shape.Equal(rowShape) {
			return Errorf(ErrShape, op, names[i], "has shape %v, want %v (Hidden without D)", t.shape, rowShape)
		}
	}
	if err := checkAll(op, names, 0, rows...); err != nil {
		return err
	}
	for i, t := range rows[:min(2, len(rows))] {
		if t == nil {
			return Errorf(ErrShape, op, names[i], "is nil")
		}
	}
	if !(in.Temperature > 0) || math.IsInf(float64(in.Temperature), 1) {
		return Errorf(ErrParam, op, "Temperature", "is %v, want a finite value > 0", in.Temperature)
	}
	if err := CheckSameBackend(op, append([]string{"Hidden", "Weight", "Targets"}, names...), append([]*Tensor{in.Hidden, w, in.Targets}, rows...)...); err != nil {
		return err
	}
	return checkIDs(op, "Targets", in.Targets, w.Dim(0))
}

// LMHeadGrad is what LMHeadBackward reads: the forward's inputs and outputs and the gradients
// flowing into them.
type LMHeadGrad struct {
	LMHeadInputs
	// LogProbs and Entropy are LMHeadLogProbs' outputs; both required.
	LogProbs, Entropy *Tensor
	// DLogProbs and DEntropy are d loss/d logp and d loss/d entropy; either may be nil (zero).
	DLogProbs, DEntropy *Tensor
	// Accumulate adds into dweight instead of overwriting it; dhidden is always overwritten.
	Accumulate bool
	// GradBF16 rounds the logits gradient to bfloat16 before its products with the weight and
	// the hidden states, as torch's bfloat16 autograd does (a relative change of at most 2⁻⁸ per
	// element); dhidden and dweight are still float32 sums. With bfloat16 hidden states and
	// weight on a CPU with AVX512_BF16 both products then run on VDPBF16PS, the backward's two
	// float32 GEMMs at twice the rate. Off, the gradient is float32 throughout.
	GradBF16 bool
}

// LMHeadBackward writes dhidden (Hidden's shape, float32) and dweight ([V, D], float32): the
// gradients of Σ DLogProbs·logp + DEntropy·entropy through the logits, which are recomputed once,
// one vocabulary chunk at a time (never [N, V]). The logits gradient of a chunk is
// dz = dlogp·(1[v=y] − p) − dentropy·p·(log p + H), divided by the temperature, as in
// LogProbEntropyBackward; it is multiplied into dhidden (parallel over rows, against the chunk's
// Wᵀ, packed for it) and into dweight's chunk (parallel over D), so both sums run in a fixed
// order. A nil dweight means a frozen head: its product and the transposed hidden states it
// needs are skipped (two GEMM-sized passes instead of three).
func LMHeadBackward(dhidden, dweight *Tensor, in LMHeadGrad) error {
	const op = "tensor.LMHeadBackward"
	rows := []*Tensor{in.LogProbs, in.Entropy, in.DLogProbs, in.DEntropy}
	if err := checkLMHead(op, in.LMHeadInputs, rows, []string{"LogProbs", "Entropy", "DLogProbs", "DEntropy"}); err != nil {
		return err
	}
	if err := checkNonNil(op, []string{"dhidden"}, dhidden); err != nil {
		return err
	}
	if err := CheckShape(op, "dhidden", dhidden, in.Hidden.shape...); err != nil {
		return err
	}
	if dweight != nil {
		if err := CheckSameShape(op, "Weight", in.Weight.w, "dweight", dweight); err != nil {
			return err
		}
	}
	if err := checkF32(op, []string{"dhidden", "dweight"}, dhidden, dweight); err != nil {
		return err
	}
	if err := CheckSameBackend(op, []string{"Hidden", "dhidden", "dweight"}, in.Hidden, dhidden, dweight); err != nil {
		return err
	}
	if k, ok := KernelOf[LMHeadKernel](dhidden.Backend()); ok {
		return k.LMHeadBackward(dhidden, dweight, in)
	}
	n, d, v := rowsOf(in.Hidden), in.Hidden.Dim(-1), in.Weight.w.Dim(0)
	ts := []*Tensor{dhidden, dweight, in.Hidden, in.Weight.w, in.Targets, in.LogProbs, in.Entropy, in.DLogProbs, in.DEntropy}
	return OnHost(2, ts, func(h []*Tensor) error {
		dl := hostF32(h[7])
		if dl == nil {
			dl = make([]float32, n)
		}
		g := nnref.LMHeadGrad[float32]{Targets: hostI32(h[4]), LogP: hostF32(h[5]), Ent: hostF32(h[6]),
			DLogP: dl, DEnt: hostF32(h[8]), Temp: in.Temperature, BF16: in.GradBF16}
		k := lmKernels(in.Weight, d, h[2], h[3], &lmBackward{dweight: dweight != nil, gradBF16: in.GradBF16})
		nnref.LMHeadBackward(n, d, v, k, g, hostF32(h[0]), hostF32(h[1]), in.Accumulate)
		return nil
	})
}

func (g *cpuLMKernels) Fold(z []float32) (m float32, s, t float64) {
	k := lpImpls.Active()
	n := 0
	if k != nil {
		n = len(z) &^ (k.lanes - 1)
		m = k.max32(z[:n])
	} else {
		m = float32(math.Inf(-1))
	}
	m = max(m, blockMax(z[n:]))
	if math.IsInf(float64(m), -1) {
		return m, 0, 0
	}
	if k != nil {
		bs, bt, _ := k.fold32(z[:n], nil, m, 1)
		s, t = float64(bs), float64(bt)
	}
	var acc [4]float32
	foldBlock(&acc, z[n:], m)
	return m, s + float64(acc[0]+acc[1]), t + float64(acc[2]+acc[3])
}

func (g *cpuLMKernels) GradRow(dz, z []float32, y int, lse, gl, ge, ent float64, temp float32) {
	l, fgl, fge, h, invT := float32(lse), float32(gl), float32(ge), float32(ent), 1/temp
	n := 0
	if k := lpImpls.Active(); k != nil {
		n = len(z) &^ (k.lanes - 1)
		k.bwd32to32[0](dz[:n], z[:n], 1, l, fgl, fge, h, -invT)
	}
	gradBlock(dz[n:], z[n:], l, fgl, fge, h)
	for j := n; j < len(z); j++ {
		dz[j] *= invT
	}
	if y >= 0 && y < len(z) {
		dz[y] += fgl * invT
	}
}
