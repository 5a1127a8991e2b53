package tensor

import (
	"math"
	"sync"

	"github.com/mtrl-go/mtrl/internal/dispatch"
	"github.com/mtrl-go/mtrl/internal/parallel"
)

// The activation dtype of the non-GEMM transformer ops (RMSNorm, LayerNorm, RoPE, the
// activations and SwiGLU, embedding gather and scatter-add): their activations (x, y, dy, dx,
// the gathered and added rows) share one dtype, float32 or bfloat16; their parameters (norm
// weight and bias, embedding table) are float32 or the activations' dtype; parameter gradients
// are float32. The arithmetic is the float32 op's: on the host a bfloat16 op widens its inputs a
// block at a time into float32 scratch, runs the float32 kernel on the block and rounds each
// output to nearest even once, at the store (the ops with vector kernels of their own, in
// norm_cpu.go, rope_cpu.go and activation_cpu.go, widen and round inside them instead).

// checkActs checks that the non-nil activations ts share one dtype, float32 or bfloat16, and
// returns it (0 when all are nil).
func checkActs(op string, names []string, ts ...*Tensor) (DType, error) {
	var dt DType
	first := ""
	for i, t := range ts {
		if t == nil {
			continue
		}
		if dt == 0 {
			if err := CheckDType(op, names[i], t, Float32, BFloat16); err != nil {
				return 0, err
			}
			dt, first = t.dtype, names[i]
			continue
		}
		if err := CheckTensor(op, names[i], t); err != nil {
			return 0, err
		}
		if t.dtype != dt {
			return 0, Errorf(ErrDType, op, names[i], "is %v, want %v like %s (the activations share one dtype)", t.dtype, dt, first)
		}
	}
	return dt, nil
}

// checkParams checks that the non-nil parameters ts are float32 or act, the activations' dtype.
func checkParams(op string, act DType, names []string, ts ...*Tensor) error {
	for i, t := range ts {
		if t == nil {
			continue
		}
		if err := CheckTensor(op, names[i], t); err != nil {
			return err
		}
		if t.dtype == Float32 || t.dtype == act {
			continue
		}
		if act == Float32 {
			return Errorf(ErrDType, op, names[i], "is %v, want float32 with float32 activations (a bfloat16 parameter goes with bfloat16 activations)", t.dtype)
		}
		return Errorf(ErrDType, op, names[i], "is %v, want float32 or the activations' %v", t.dtype, act)
	}
	return nil
}

// actView reads and writes a host tensor of float32 or bfloat16 as float32, a range of elements
// at a time: a float32 tensor's own slice, or scratch that a bfloat16 tensor's elements are
// widened into (load) or rounded from (store).
type actView struct {
	f   []float32
	b   []BF16
	b16 bool
}

func viewOf(t *Tensor) actView {
	if t == nil {
		return actView{}
	}
	if t.dtype == BFloat16 {
		b, _ := t.BF16s()
		return actView{b: b, b16: true}
	}
	f, _ := t.Float32s()
	return actView{f: f}
}

// load returns elements [lo, hi) as float32: the tensor's slice, or widened into buf (length at
// least hi−lo).
func (v actView) load(lo, hi int, buf []float32) []float32 {
	if !v.b16 {
		return v.f[lo:hi]
	}
	buf = buf[:hi-lo]
	widenBF16(buf, v.b[lo:hi])
	return buf
}

// out returns where a kernel writes elements [lo, hi): the tensor's slice, or buf, which store
// then rounds into the tensor.
func (v actView) out(lo, hi int, buf []float32) []float32 {
	if !v.b16 {
		return v.f[lo:hi]
	}
	return buf[:hi-lo]
}

// store rounds what a kernel wrote into out's buf into elements [lo, lo+len(buf)) of a bfloat16
// tensor (nothing for float32, written in place).
func (v actView) store(lo int, buf []float32) {
	if v.b16 {
		roundBF16(v.b[lo:lo+len(buf)], buf)
	}
}

// bf16Conv is a vector implementation of widenBF16 and roundBF16 over whole vectors of lanes
// elements (bf16conv_amd64.s).
type bf16Conv struct {
	lanes int
	widen func(dst []float32, src []uint16)
	round func(dst []uint16, src []float32)
}

// convImpls lists the conversions this build and CPU can run, the Go loops last.
var convImpls = dispatch.New(convSIMD()...)

// widenBF16 writes src widened to float32 (exact) into dst.
func widenBF16(dst []float32, src []BF16) {
	dst = dst[:len(src)]
	if k := convImpls.Active(); k != nil {
		n := len(src) / k.lanes * k.lanes
		if n > 0 {
			k.widen(dst[:n], bf16Bits(src[:n]))
		}
		dst, src = dst[n:], src[n:]
	}
	for i, h := range src {
		dst[i] = math.Float32frombits(uint32(h) << 16)
	}
}

// roundBF16 writes src rounded to bfloat16 (nearest even, as BF16FromFloat32) into dst.
func roundBF16(dst []BF16, src []float32) {
	src = src[:len(dst)]
	if k := convImpls.Active(); k != nil {
		n := len(src) / k.lanes * k.lanes
		if n > 0 {
			k.round(bf16Bits(dst[:n]), src[:n])
		}
		dst, src = dst[n:], src[n:]
	}
	for i, f := range src {
		dst[i] = BF16FromFloat32(f)
	}
}

// arena is the float32 scratch of one block of a bfloat16 op.
type arena struct {
	buf []float32
	off int
}

var arenas = sync.Pool{New: func() any { return new(arena) }}

// take returns n float32s of scratch, valid until the block ends.
func (a *arena) take(n int) []float32 {
	if a.off+n > len(a.buf) {
		a.buf, a.off = make([]float32, max(2*len(a.buf), n, 1<<12)), 0
	}
	s := a.buf[a.off : a.off+n : a.off+n]
	a.off += n
	return s
}

// blockElems is the size of the host ops' blocks, in elements (or one row when a row is
// longer): small enough that a block's scratch (up to five buffers) stays in the 32 KiB L1
// data cache or close to it, and at most the nnref kernels' parallel chunk (1<<14 elements),
// so that a kernel called on one block runs inline.
const blockElems = 1 << 12

// blocks runs fn over [0, n) in parallel blocks of grain items, each with its own scratch.
func blocks(n, grain int, fn func(lo, hi int, s *arena)) {
	parallel.For(n, grain, func(lo, hi int) {
		a := arenas.Get().(*arena)
		a.off = 0
		fn(lo, hi, a)
		arenas.Put(a)
	})
}
