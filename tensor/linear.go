package tensor

import (
	"sync"

	"github.com/mtrl-go/mtrl/internal/gemm"
	"github.com/mtrl-go/mtrl/internal/nnref"
)

// PackedWeight is a linear layer's weight [N, K] (out × in, the layout of a Hugging Face
// nn.Linear) together with whatever layout its backend's kernel multiplies fastest. It is built
// once by PackWeight and rebuilt by Repack after the weight changes (an optimizer step), so no
// call transposes or repacks the weight. On the CPU with AVX2 or AVX-512 the layout is
// internal/gemm's panels (a float32 copy of W, and of Wᵀ once a backward needs it); the pure-Go
// reference needs none: it reads W row by row (one dot product per output).
type PackedWeight struct {
	w      *Tensor
	packed any
	// dropped: the values were released (DropValues); w is then a float32 view of the panels
	// with the weight's shape, which the checks read for its shape and backend, never its values.
	dropped bool
	noKeepT bool // KeepTransposed(false)
}

// LinearKernel is implemented by backends with their own linear layer. PackWeight returns the
// backend's layout of w (kept in PackedWeight.Packed); the other methods receive validated
// tensors.
type LinearKernel interface {
	PackWeight(w *Tensor) (any, error)
	Linear(y, x *Tensor, w *PackedWeight, bias *Tensor) error
	LinearBackward(out LinearGradOut, in LinearGrad) error
}

// PackWeight wraps w [N, K] (float32 or bfloat16) for Linear, packing it with the backend's
// LinearKernel when it has one. The PackedWeight refers to w; call Repack after changing w.
func PackWeight(w *Tensor) (*PackedWeight, error) {
	const op = "tensor.PackWeight"
	if err := CheckShape(op, "w", w, -1, -1); err != nil {
		return nil, err
	}
	if err := CheckDType(op, "w", w, Float32, BFloat16); err != nil {
		return nil, err
	}
	p := &PackedWeight{w: w}
	return p, p.Repack()
}

// Repack rebuilds the backend's layout from the weight tensor after it changed.
func (p *PackedWeight) Repack() error {
	if p == nil || p.w == nil {
		return Errorf(ErrShape, "tensor.PackedWeight.Repack", "p", "is nil or has no weight (make it with PackWeight)")
	}
	if k, ok := KernelOf[LinearKernel](p.w.Backend()); ok {
		packed, err := k.PackWeight(p.w)
		if err != nil {
			return err
		}
		p.packed = packed
		return nil
	}
	if p.dropped {
		return Errorf(ErrParam, "tensor.PackedWeight.Repack", "p", "has dropped its values (DropValues)")
	}
	p.packed = nil
	if p.w.IsHost() && gemm.SIMD() {
		n, k := p.w.Dim(0), p.w.Dim(1)
		if b, err := p.w.BF16s(); err == nil && gemm.BF16() {
			p.packed = &hostPacked{bf16: gemm.PackBF16(n, k, b)}
			return nil
		}
		p.packed = &hostPacked{fwd: packF32(p.w)}
	}
	return nil
}

// packF32 packs a host float32 or bfloat16 weight into float32 panels.
func packF32(w *Tensor) *gemm.Packed {
	n, k := w.Dim(0), w.Dim(1)
	if v, err := w.Float32s(); err == nil {
		return gemm.PackF32(n, k, v)
	}
	return gemm.Pack(n, k, elemOf(w))
}

// hostPacked is the CPU's layout of a weight W [N, K]: W's panels for the forward and, built by
// the first backward, Wᵀ's for dx = dy·W. A bfloat16 weight on a CPU with AVX512_BF16 is packed
// as bfloat16 pairs (bf16) for inputs that are bfloat16 too, at half the bytes; its float32
// panels (fwd) are then built only when a float32 input needs them.
type hostPacked struct {
	fwd     *gemm.Packed
	bf16    *gemm.PackedBF16
	mu      sync.Mutex
	bwd     *gemm.Packed
	bwdBF16 *gemm.PackedBF16 // Wᵀ's bfloat16 pairs, for LinearGrad.GradBF16
}

// forward returns W's float32 panels, packing them on first use for a bfloat16 weight.
func (h *hostPacked) forward(w *Tensor) *gemm.Packed {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fwd == nil {
		h.fwd = packF32(w)
	}
	return h.fwd
}

// pairs returns W's bfloat16 pair panels when x is bfloat16 and the VDPBF16PS kernels are
// selected (nil otherwise: the float32 panels serve).
func (h *hostPacked) pairs(x *Tensor) *gemm.PackedBF16 {
	if h.bf16 == nil || x.dtype != BFloat16 || !gemm.BF16() {
		return nil
	}
	return h.bf16
}

// transposed returns Wᵀ's panels: kept after the first call, or packed for this call alone when
// p does not keep them (KeepTransposed(false)), into a pooled buffer that release returns;
// from the forward panels when the values were dropped.
func (p *PackedWeight) transposed() (t *gemm.Packed, release func()) {
	h := p.packed.(*hostPacked)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.bwd != nil {
		return h.bwd, func() {}
	}
	var buf *gemm.Packed
	if p.noKeepT {
		buf, _ = transposePool.Get().(*gemm.Packed)
	}
	switch v, err := p.w.Float32s(); {
	case p.dropped:
		t = gemm.TransposeInto(buf, h.fwd, 0, h.fwd.N)
	case err == nil:
		t = gemm.PackTInto(buf, p.w.Dim(0), p.w.Dim(1), v)
	default:
		t = gemm.PackT(p.w.Dim(0), p.w.Dim(1), elemOf(p.w))
	}
	if !p.noKeepT {
		h.bwd = t
		return t, func() {}
	}
	return t, func() { transposePool.Put(t) }
}

// transposedBF16 is transposed for Wᵀ's bfloat16 pair panels (from the bfloat16 weight),
// kept or pooled alike.
func (p *PackedWeight) transposedBF16() (t *gemm.PackedBF16, release func()) {
	h := p.packed.(*hostPacked)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.bwdBF16 != nil {
		return h.bwdBF16, func() {}
	}
	var buf *gemm.PackedBF16
	if p.noKeepT {
		buf, _ = transposeBF16Pool.Get().(*gemm.PackedBF16)
	}
	b, _ := p.w.BF16s()
	t = gemm.PackTBF16Into(buf, p.w.Dim(0), p.w.Dim(1), b)
	if !p.noKeepT {
		h.bwdBF16 = t
		return t, func() {}
	}
	return t, func() { transposeBF16Pool.Put(t) }
}

var transposeBF16Pool sync.Pool

// transposePool holds the transposed panels that backward passes of weights that keep none
// pack for themselves (a frozen base: every projection of every layer per pass), so they
// reuse one buffer instead of leaving the collector a weight's worth of garbage each.
var transposePool sync.Pool

// KeepTransposed says whether the first backward's transposed layout (Wᵀ's panels, as large as
// the weight) is kept for the next ones (the default) or packed by each backward for itself and
// let go: the memory of a frozen weight, whose transposed panels a LoRA backward needs once per
// pass, against a repack of O(N·K) per backward.
func (p *PackedWeight) KeepTransposed(keep bool) {
	if p == nil {
		return
	}
	p.noKeepT = !keep
	if h, ok := p.packed.(*hostPacked); ok && !keep {
		h.mu.Lock()
		h.bwd, h.bwdBF16 = nil, nil
		h.mu.Unlock()
	}
}

// DropValues releases the weight's own values when its packed layout holds them all (a host
// weight packed for the vector GEMM), so a frozen weight is held once: Linear, LinearBackward's
// dx and the LM head read the panels alone. Afterwards Weight is nil (Dims gives the shape),
// Row and Values read the values back from the panels, and Repack fails. The caller drops its
// own references to the weight tensor for the memory to be freed. On Unix the panels move out
// of the Go heap (gemm.Packed.MoveOffHeap), so weights held for the process's life do not raise
// the collector's heap goal.
func (p *PackedWeight) DropValues() error {
	const op = "tensor.PackedWeight.DropValues"
	if p == nil || p.w == nil {
		return Errorf(ErrShape, op, "p", "is nil or has no weight (make it with PackWeight)")
	}
	if p.dropped {
		return nil
	}
	h, ok := p.packed.(*hostPacked)
	if !ok || h.fwd == nil {
		return Errorf(ErrBackend, op, "p", "has no float32 host panels to keep its values (a device weight, no vector GEMM, or bfloat16 pairs)")
	}
	h.fwd.MoveOffHeap()
	n, k := p.w.Dim(0), p.w.Dim(1)
	view, err := FromFloat32(h.fwd.Values()[:n*k], n, k)
	if err != nil {
		return err
	}
	p.w, p.dropped = view, true
	return nil
}

// Dims returns the weight's shape [N, K] (also after DropValues).
func (p *PackedWeight) Dims() (n, k int) {
	if p == nil || p.w == nil {
		return 0, 0
	}
	return p.w.Dim(0), p.w.Dim(1)
}

// Row copies row i of the weight into dst[:K] as float32 (from the panels after DropValues).
func (p *PackedWeight) Row(i int, dst []float32) error {
	const op = "tensor.PackedWeight.Row"
	n, k := p.Dims()
	switch {
	case p == nil || p.w == nil:
		return Errorf(ErrShape, op, "p", "is nil or has no weight")
	case i < 0 || i >= n:
		return Errorf(ErrParam, op, "i", "is %d, want a row in [0, %d)", i, n)
	case len(dst) < k:
		return Errorf(ErrShape, op, "dst", "has %d elements, want >= %d", len(dst), k)
	}
	if p.dropped {
		p.packed.(*hostPacked).fwd.Row(i, dst)
		return nil
	}
	h, err := To(CPU(), p.w)
	if err != nil {
		return err
	}
	at := elemOf(h)
	for j := range k {
		dst[j] = at(i*k + j)
	}
	return nil
}

// Values returns the weight: the tensor itself, or after DropValues a new float32 host copy
// unpacked from the panels (an export or a merge of a frozen weight).
func (p *PackedWeight) Values() (*Tensor, error) {
	if p == nil || p.w == nil {
		return nil, Errorf(ErrShape, "tensor.PackedWeight.Values", "p", "is nil or has no weight")
	}
	if !p.dropped {
		return p.w, nil
	}
	n, k := p.Dims()
	v := make([]float32, n*k)
	p.packed.(*hostPacked).fwd.Unpack(v)
	return FromFloat32(v, n, k)
}

// hostValues returns the weight's float32 values on the host for the pure-Go reference
// kernels: the held values, or a copy unpacked from the panels after DropValues.
func (p *PackedWeight) hostValues(h *Tensor) []float32 {
	if !p.dropped {
		return hostF32(h)
	}
	v := make([]float32, h.Len())
	p.packed.(*hostPacked).fwd.Unpack(v)
	return v
}

// elemOf returns a function reading element i of a host float32 or bfloat16 tensor.
func elemOf(t *Tensor) func(i int) float32 {
	if t.dtype == BFloat16 {
		b, _ := t.BF16s()
		return func(i int) float32 { return b[i].Float32() }
	}
	v, _ := t.Float32s()
	return func(i int) float32 { return v[i] }
}

// gemmOf returns the CPU layout of w when the vector GEMM should run (a vector implementation
// is selected: internal/dispatch.ForceGo selects the pure-Go reference instead).
func gemmOf(w *PackedWeight) (*hostPacked, bool) {
	h, ok := w.packed.(*hostPacked)
	return h, ok && gemm.SIMD()
}

// Weight returns the weight tensor [N, K] (nil for a nil PackedWeight, and after DropValues).
func (p *PackedWeight) Weight() *Tensor {
	if p == nil || p.dropped {
		return nil
	}
	return p.w
}

// Packed returns the backend's layout: what its LinearKernel's PackWeight returned, the CPU's
// own (internal/gemm's panels) for a host weight on a CPU with AVX2 or AVX-512, else nil (also
// for a nil PackedWeight).
func (p *PackedWeight) Packed() any {
	if p == nil {
		return nil
	}
	return p.packed
}

// Linear computes y = x·Wᵀ for x [..., K] and y [..., N] (float32); x and W are float32 or
// bfloat16, summed in float32. When both are bfloat16 and the CPU has AVX512_BF16 the products
// run on VDPBF16PS (internal/gemm): exact products, float32 sums in pairs.
func Linear(y, x *Tensor, w *PackedWeight) error {
	return linear("tensor.Linear", y, x, w, nil)
}

// LinearBias computes y = x·Wᵀ + bias with bias [N] (float32), added after the sum.
func LinearBias(y, x *Tensor, w *PackedWeight, bias *Tensor) error {
	if bias == nil {
		return Errorf(ErrShape, "tensor.LinearBias", "bias", "is nil (use Linear)")
	}
	return linear("tensor.LinearBias", y, x, w, bias)
}

func checkLinear(op string, x *Tensor, w *PackedWeight) (n, k int, err error) {
	if w == nil || w.w == nil {
		return 0, 0, Errorf(ErrShape, op, "w", "is nil")
	}
	if x == nil {
		return 0, 0, Errorf(ErrShape, op, "x", "is nil")
	}
	if err := CheckDType(op, "x", x, Float32, BFloat16); err != nil {
		return 0, 0, err
	}
	n, k = w.w.Dim(0), w.w.Dim(1)
	if x.Rank() < 1 || x.Dim(-1) != k {
		return 0, 0, Errorf(ErrShape, op, "x", "has shape %v, want [..., %d] (the weight is %v)", x.shape, k, w.w.shape)
	}
	return n, k, nil
}

// withLast returns t's shape with its last dimension replaced by d.
func withLast(t *Tensor, d int) []int {
	s := append([]int{}, t.shape...)
	s[len(s)-1] = d
	return s
}

func linear(op string, y, x *Tensor, w *PackedWeight, bias *Tensor) error {
	n, k, err := checkLinear(op, x, w)
	if err != nil {
		return err
	}
	if err := CheckShape(op, "y", y, withLast(x, n)...); err != nil {
		return err
	}
	if bias != nil {
		if err := CheckShape(op, "bias", bias, n); err != nil {
			return err
		}
	}
	names := []string{"y", "bias", "x", "w"}
	if err := checkF32(op, names[:2], y, bias); err != nil {
		return err
	}
	if err := CheckSameBackend(op, names, y, bias, x, w.w); err != nil {
		return err
	}
	if kl, ok := KernelOf[LinearKernel](x.Backend()); ok {
		return kl.Linear(y, x, w, bias)
	}
	return OnHost(1, []*Tensor{y, x, w.w, bias}, func(h []*Tensor) error {
		m := rowsOf(h[1])
		if hp, ok := gemmOf(w); ok {
			yv := hostF32(h[0])
			if pb := hp.pairs(h[1]); pb != nil {
				xb, _ := h[1].BF16s()
				gemm.MulBF16(m, xb, k, pb, yv, n, false)
			} else {
				gemm.Mul(m, hostF32(h[1]), k, hp.forward(h[2]), yv, n, false)
			}
			if bias != nil {
				nnref.AddBias(m, n, yv, hostF32(h[3]))
			}
			return nil
		}
		nnref.Linear(m, n, k, hostF32(h[1]), w.hostValues(h[2]), hostF32(h[3]), hostF32(h[0]))
		return nil
	})
}

// LinearGrad is what LinearBackward reads: the forward's input and weight and the gradient
// flowing into its output.
type LinearGrad struct {
	X      *Tensor // [..., K], float32 or bfloat16
	Weight *PackedWeight
	DY     *Tensor // [..., N], float32
	// Accumulate adds into DWeight and DBias (gradient accumulation over micro-batches) instead
	// of overwriting them; DX is always overwritten.
	Accumulate bool
	// GradBF16 rounds DY to bfloat16 (nearest even) before its products with the weight and X,
	// as torch's bfloat16 autograd does; DBias stays the float32 sum of DY, and DX and DWeight
	// are float32 sums of exact products of the rounded DY. With a bfloat16 weight, X bfloat16
	// and a CPU with AVX512_BF16, both products run on VDPBF16PS (the weight's transposed pairs
	// packed once, as the float32 Wᵀ panels are), at twice the float32 GEMM's rate. The rounding
	// moves each DY element by at most 2⁻⁸ of its magnitude, so DX differs from the float32
	// backward's dy·W by at most (2⁻⁸ + adds·2⁻²⁴)·Σ|dy|·|w| per element to first order (adds:
	// the float32 sums' additions, N plus one per 256-long block of N; likewise for DWeight
	// over the rows, plus one with Accumulate). A backend's own LinearKernel may compute in
	// float32 instead (within the same bound).
	GradBF16 bool
}

// LinearGradOut are LinearBackward's outputs (float32); a nil field is not computed.
type LinearGradOut struct {
	DX      *Tensor // [..., K]: dy·W
	DWeight *Tensor // [N, K]: dyᵀ·x summed over every leading index
	DBias   *Tensor // [N]: dy summed over every leading index
}

// LinearBackward computes the gradients of Linear (or LinearBias) from in.DY.
func LinearBackward(out LinearGradOut, in LinearGrad) error {
	const op = "tensor.LinearBackward"
	n, k, err := checkLinear(op, in.X, in.Weight)
	if err != nil {
		return err
	}
	if err := CheckShape(op, "DY", in.DY, withLast(in.X, n)...); err != nil {
		return err
	}
	if out.DX != nil {
		if err := CheckSameShape(op, "X", in.X, "DX", out.DX); err != nil {
			return err
		}
	}
	if out.DWeight != nil {
		if err := CheckShape(op, "DWeight", out.DWeight, n, k); err != nil {
			return err
		}
	}
	if out.DBias != nil {
		if err := CheckShape(op, "DBias", out.DBias, n); err != nil {
			return err
		}
	}
	names := []string{"DX", "DWeight", "DBias", "DY", "X", "Weight"}
	ts := []*Tensor{out.DX, out.DWeight, out.DBias, in.DY, in.X, in.Weight.w}
	if err := checkF32(op, names[:4], ts[:4]...); err != nil {
		return err
	}
	if err := CheckSameBackend(op, names, ts...); err != nil {
		return err
	}
	if kl, ok := KernelOf[LinearKernel](in.X.Backend()); ok {
		return kl.LinearBackward(out, in)
	}
	return OnHost(3, ts, func(h []*Tensor) error {
		m := rowsOf(h[4])
		dy := hostF32(h[3])
		if hp, ok := gemmOf(in.Weight); ok {
			if in.GradBF16 {
				linearBackwardBF16(m, n, k, in.Weight, hp, h[4], dy, hostF32(h[0]), hostF32(h[1]), hostF32(h[2]), in.Accumulate)
				return nil
			}
			linearBackwardGEMM(m, n, k, in.Weight, hostF32(h[4]), dy, hostF32(h[0]), hostF32(h[1]), hostF32(h[2]), in.Accumulate)
			return nil
		}
		db := hostF32(h[2])
		if in.GradBF16 { // db from the float32 dy, the products from the rounded one
			if db != nil {
				nnref.ColSum(m, n, dy, in.Accumulate, db)
				db = nil
			}
			dy = roundedCopy(dy)
		}
		nnref.LinearBackward(m, n, k, hostF32(h[4]), in.Weight.hostValues(h[5]), dy,
			hostF32(h[0]), hostF32(h[1]), db, in.Accumulate)
		return nil
	})
}

// linearBackwardGEMM is LinearBackward through internal/gemm: dx = dy·W with Wᵀ's panels, and
// dw = dyᵀ·x with dy transposed and x packed for this call (O(m·(n+k)) against the product's
// O(m·n·k)). Nil outputs are skipped.
func linearBackwardGEMM(m, n, k int, w *PackedWeight, x, dy, dx, dw, db []float32, acc bool) {
	if dx != nil {
		wT, release := w.transposed()
		gemm.Mul(m, dy, n, wT, dx, k, false)
		release()
	}
	if dw != nil {
		dyT := make([]float32, n*m)
		for i := range m {
			for j, v := range dy[i*n : (i+1)*n] {
				dyT[j*m+i] = v
			}
		}
		xT := gemm.PackTF32(m, k, x)
		gemm.Mul(n, dyT, m, xT, dw, k, acc)
	}
	if db != nil {
		nnref.ColSum(m, n, dy, acc, db)
	}
}

// roundedCopy returns v's values rounded to bfloat16, as float32.
func roundedCopy(v []float32) []float32 {
	r := append([]float32(nil), v...)
	RoundFloat32s(r)
	return r
}

// linearBackwardBF16 is linearBackwardGEMM with dy rounded to bfloat16 (LinearGrad.GradBF16):
// dx = bf16(dy)·W on VDPBF16PS with Wᵀ's pairs when the weight is packed as pairs, and
// dw = bf16(dy)ᵀ·x with x's transposed pairs when x is bfloat16; a product whose operands are
// not both bfloat16 (or a CPU without AVX512_BF16) runs the float32 GEMM on the rounded dy,
// the same exact products. db is dy's float32 column sum.
func linearBackwardBF16(m, n, k int, w *PackedWeight, hp *hostPacked, x *Tensor, dy, dx, dw, db []float32, acc bool) {
	if db != nil {
		nnref.ColSum(m, n, dy, acc, db)
	}
	dyb := make([]BF16, m*n)
	RoundToBF16(dyb, dy)
	var dyr []float32 // the rounded dy as float32, for the float32 products
	f32dy := func() []float32 {
		if dyr == nil {
			dyr = make([]float32, m*n)
			WidenBF16(dyr, dyb)
		}
		return dyr
	}
	xb, xErr := x.BF16s()
	if dx != nil {
		if hp.bf16 != nil && gemm.BF16() {
			wT, release := w.transposedBF16()
			gemm.MulBF16(m, dyb, n, wT, dx, k, false)
			release()
		} else {
			linearBackwardGEMM(m, n, k, w, nil, f32dy(), dx, nil, nil, acc)
		}
	}
	if dw == nil {
		return
	}
	if xErr != nil || !gemm.BF16() {
		linearBackwardGEMM(m, n, k, w, hostF32(x), f32dy(), nil, dw, nil, acc)
		return
	}
	dyT := make([]BF16, n*m)
	for i := range m {
		for j, v := range dyb[i*n : (i+1)*n] {
			dyT[j*m+i] = v
		}
	}
	gemm.MulBF16(n, dyT, m, gemm.PackTBF16(m, k, xb), dw, k, acc)
}
