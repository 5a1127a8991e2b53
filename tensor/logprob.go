package tensor

import (
	"math"
	"unsafe"

	"github.com/mtrl-go/mtrl/internal/dispatch"
	"github.com/mtrl-go/mtrl/internal/hostops"
	"github.com/mtrl-go/mtrl/internal/parallel"
)

// LogProbEntropyKernel is implemented by backends with a fused on-device log-prob/entropy pass.
type LogProbEntropyKernel interface {
	LogProbEntropy(logp, entropy, logits, targets *Tensor, temperature float32) error
	LogProbEntropyBackward(dlogits, logits, targets, logp, entropy, dlogp, dentropy *Tensor, temperature float32) error
}

// LogProbEntropy reads logits [..., V] (float32 or bfloat16) once and writes, for every row,
// the log-probability of the target token and the entropy of softmax(logits/temperature):
//
//	z = logits / temperature
//	logp[i]    = z[i, y_i] - logsumexp(z[i])
//	entropy[i] = -sum_v softmax(z[i])_v * log softmax(z[i])_v
//
// targets (int32) and the outputs (float32) have the logits' shape without its last dimension;
// both outputs are required (LogProbs writes the log-probs alone). It is a single
// online-softmax pass with no [N, V] temporary. Log-probs are clamped at -MaxFloat32 as in the
// reference. Logits of -Inf (masked vocabulary) are fine; a row that is -Inf everywhere, or
// holds NaN or +Inf, gives NaN. A target outside [0, V) is an ErrParam error.
func LogProbEntropy(logp, entropy, logits, targets *Tensor, temperature float32) error {
	const op = "tensor.LogProbEntropy"
	if logp == nil || entropy == nil {
		arg := "logp"
		if logp != nil {
			arg = "entropy"
		}
		return Errorf(ErrShape, op, arg, "is nil (use LogProbs for the log-probs alone)")
	}
	return logProbEntropy(op, logp, entropy, logits, targets, temperature)
}

// LogProbs writes into logp the log-probability of the target token under
// softmax(logits/temperature), as LogProbEntropy does, without the entropy (the rollout's old,
// perturbed-image and reference log-probs need only this).
func LogProbs(logp, logits, targets *Tensor, temperature float32) error {
	const op = "tensor.LogProbs"
	if logp == nil {
		return Errorf(ErrShape, op, "logp", "is nil")
	}
	return logProbEntropy(op, logp, nil, logits, targets, temperature)
}

// logProbEntropy validates and runs LogProbEntropy with either output nil.
func logProbEntropy(op string, logp, entropy, logits, targets *Tensor, temperature float32) error {
	if err := checkLogProb(op, logits, targets, temperature, []string{"logp", "entropy"}, logp, entropy); err != nil {
		return err
	}
	if k, ok := KernelOf[LogProbEntropyKernel](logits.Backend()); ok {
		return k.LogProbEntropy(logp, entropy, logits, targets, temperature)
	}
	return OnHost(2, []*Tensor{logp, entropy, logits, targets}, func(h []*Tensor) error {
		return logProbEntropyHost(op, h[0], h[1], h[2], h[3], temperature)
	})
}

// LogProbGrad is what LogProbEntropyBackward reads: the forward's inputs and outputs and the
// gradients that flow into the outputs. Row tensors have the logits' shape without its last
// dimension.
type LogProbGrad struct {
	// Logits [..., V] (float32 or bfloat16) and Targets (int32) are the forward's inputs.
	Logits, Targets *Tensor
	// LogProbs are the forward's log-probs (float32); always required.
	LogProbs *Tensor
	// Entropy are the forward's entropies (float32); required when DEntropy is set.
	Entropy *Tensor
	// DLogProbs and DEntropy are d loss / d log-prob and d loss / d entropy (float32); either may
	// be nil, meaning zero.
	DLogProbs, DEntropy *Tensor
	// Temperature is the forward's temperature, > 0 (there is no default: it must match).
	Temperature float32
}

// LogProbEntropyBackward writes into dlogits [..., V] (float32 or bfloat16) the gradient of
// sum_i DLogProbs[i]*logp[i] + DEntropy[i]*entropy[i] with respect to the raw logits (the
// 1/temperature factor included):
//
//	dz_v = dlogp*(1[v=y] - p_v) - dentropy*p_v*(log p_v + H),  dlogits = dz / temperature
func LogProbEntropyBackward(dlogits *Tensor, in LogProbGrad) error {
	const op = "tensor.LogProbEntropyBackward"
	logits, targets, logp, entropy, dlogp, dentropy := in.Logits, in.Targets, in.LogProbs, in.Entropy, in.DLogProbs, in.DEntropy
	temperature := in.Temperature
	names := []string{"LogProbs", "Entropy", "DLogProbs", "DEntropy"}
	if err := checkLogProb(op, logits, targets, temperature, names, logp, entropy, dlogp, dentropy); err != nil {
		return err
	}
	if logp == nil {
		return Errorf(ErrShape, op, "LogProbs", "is nil (the forward log-probs are required)")
	}
	if dentropy != nil && entropy == nil {
		return Errorf(ErrShape, op, "Entropy", "is nil but DEntropy is given")
	}
	if err := CheckSameShape(op, "logits", logits, "dlogits", dlogits); err != nil {
		return err
	}
	if err := CheckDType(op, "dlogits", dlogits, Float32, BFloat16); err != nil {
		return err
	}
	if err := CheckSameBackend(op, []string{"logits", "dlogits"}, logits, dlogits); err != nil {
		return err
	}
	if k, ok := KernelOf[LogProbEntropyKernel](logits.Backend()); ok {
		return k.LogProbEntropyBackward(dlogits, logits, targets, logp, entropy, dlogp, dentropy, temperature)
	}
	return OnHost(1, []*Tensor{dlogits, logits, targets, logp, entropy, dlogp, dentropy}, func(h []*Tensor) error {
		return logProbEntropyBackwardHost(op, h[0], h[1], h[2], h[3], h[4], h[5], h[6], temperature)
	})
}

func checkLogProb(op string, logits, targets *Tensor, temperature float32, names []string, rowTensors ...*Tensor) error {
	if logits == nil {
		return Errorf(ErrShape, op, "logits", "is nil")
	}
	if logits.Rank() < 2 {
		return Errorf(ErrShape, op, "logits", "has shape %v, want [..., V] with at least 2 dimensions", logits.shape)
	}
	if err := CheckDType(op, "logits", logits, Float32, BFloat16); err != nil {
		return err
	}
	if logits.Dim(-1) == 0 {
		return Errorf(ErrShape, op, "logits", "has an empty vocabulary dimension")
	}
	rowShape := logits.shape[:logits.Rank()-1]
	if targets == nil || !targets.shape.Equal(rowShape) {
		if targets == nil {
			return Errorf(ErrShape, op, "targets", "is nil")
		}
		return Errorf(ErrShape, op, "targets", "has shape %v, want %v (logits without V)", targets.shape, rowShape)
	}
	if err := CheckDType(op, "targets", targets, Int32); err != nil {
		return err
	}
	if !(temperature > 0) || math.IsInf(float64(temperature), 0) {
		return Errorf(ErrParam, op, "temperature", "is %v, want a finite value > 0", temperature)
	}
	for i, t := range rowTensors {
		if t == nil {
			continue
		}
		if !t.shape.Equal(rowShape) {
			return Errorf(ErrShape, op, names[i], "has shape %v, want %v (logits without V)", t.shape, rowShape)
		}
		if err := CheckDType(op, names[i], t, Float32); err != nil {
			return err
		}
	}
	all := append([]*Tensor{logits, targets}, rowTensors...)
	return CheckSameBackend(op, append([]string{"logits", "targets"}, names...), all...)
}

// vocabBlock is how many logits the pure-Go online softmax folds at a time: small enough for
// L1, large enough that the per-block max/rescale costs nothing. The SIMD kernels use simdBlock.
const vocabBlock = 512

// simdBlock is the block of the SIMD kernels: 16 KiB of float32 logits, still in L1 when the
// fold rereads what the block maximum just loaded, and long enough that the two assembly calls
// and the rescale per block are noise.
const simdBlock = 4096

// logitRows gives row i of the logits as float32, converting bfloat16 through scratch.
type logitRows struct {
	f32 []float32
	b16 []BF16
	v   int
}

func newLogitRows(logits *Tensor) logitRows {
	r := logitRows{v: logits.Dim(-1)}
	if logits.dtype == Float32 {
		r.f32, _ = logits.Float32s()
	} else {
		r.b16, _ = logits.BF16s()
	}
	return r
}

// block returns logits [lo, hi) of row i; scratch must hold vocabBlock values.
func (r logitRows) block(i, lo, hi int, scratch []float32) []float32 {
	if r.f32 != nil {
		return r.f32[i*r.v+lo : i*r.v+hi]
	}
	src := r.b16[i*r.v+lo : i*r.v+hi]
	dst := scratch[:len(src)]
	for j, h := range src {
		dst[j] = h.Float32()
	}
	return dst
}

func (r logitRows) at(i, v int) float32 {
	if r.f32 != nil {
		return r.f32[i*r.v+v]
	}
	return r.b16[i*r.v+v].Float32()
}

// u16 returns bfloat16 logits [lo, hi) of row i as raw bits, for the assembly kernels.
func (r logitRows) u16(i, lo, hi int) []uint16 {
	return bf16Bits(r.b16[i*r.v+lo : i*r.v+hi])
}

func bf16Bits(b []BF16) []uint16 {
	return unsafe.Slice((*uint16)(unsafe.SliceData(b)), len(b))
}

// hasNaN reports whether logits [lo, hi) of row i hold a NaN.
func (r logitRows) hasNaN(i, lo, hi int) bool {
	if r.f32 != nil {
		for _, v := range r.f32[i*r.v+lo : i*r.v+hi] {
			if v != v {
				return true
			}
		}
		return false
	}
	for _, h := range r.b16[i*r.v+lo : i*r.v+hi] {
		if h&0x7fff > 0x7f80 {
			return true
		}
	}
	return false
}

// rowStats folds one row into the running max m (of z = x/temperature), s = sum exp(z-m) and
// t = sum exp(z-m)*(z-m). The block partial sums are float32 (two lanes), the running totals
// float64, so accuracy does not degrade with V. The block maximum ignores NaN (one predictable
// branch per logit): as in rowStatsSIMD, a NaN in a block the fold visits makes s NaN, and a
// block whose maximum is -Inf is scanned for NaN.
func rowStats(r logitRows, i int, temperature float32, scratch []float32) (m float32, s, t float64) {
	m = float32(math.Inf(-1))
	scale := temperature != 1
	for lo := 0; lo < r.v; lo += vocabBlock {
		hi := min(lo+vocabBlock, r.v)
		var x []float32
		var bm float32
		if r.f32 != nil {
			x = r.f32[i*r.v+lo : i*r.v+hi]
			bm = blockMax(x)
		} else {
			x = scratch[:hi-lo]
			bm = widenMax(x, r.b16[i*r.v+lo:i*r.v+hi])
		}
		if math.IsInf(float64(bm), -1) && r.hasNaN(i, lo, hi) {
			return float32(math.NaN()), math.NaN(), math.NaN()
		}
		if scale {
			bm /= temperature
		}
		if bm > m {
			if s > 0 {
				c := math.Exp(float64(m - bm))
				t = c * (t + s*float64(m-bm))
				s *= c
			}
			m = bm
		}
		if math.IsInf(float64(m), 0) { // every logit so far is -Inf, or one is +Inf
			if m > 0 {
				return m, math.NaN(), math.NaN()
			}
			continue
		}
		var acc [4]float32
		if scale {
			foldBlockScaled(&acc, x, m, temperature)
		} else {
			foldBlock(&acc, x, m)
		}
		s += float64(acc[0] + acc[1])
		t += float64(acc[2] + acc[3])
	}
	return m, s, t
}

// blockMax returns the maximum of x ignoring NaN (-Inf when x has no other value).
func blockMax(x []float32) float32 {
	bm := float32(math.Inf(-1))
	for _, v := range x {
		if v > bm {
			bm = v
		}
	}
	return bm
}

// widenMax converts src to float32 into dst (len(dst) == len(src)) and returns its maximum
// ignoring NaN, in one pass.
func widenMax(dst []float32, src []BF16) float32 {
	bm := float32(math.Inf(-1))
	dst = dst[:len(src)]
	for j, h := range src {
		v := h.Float32()
		dst[j] = v
		if v > bm {
			bm = v
		}
	}
	return bm
}

// rowStatsSIMD is rowStats with the block maximum and the fold in the vector kernels k: the
// same online rescaling in float64 over blocks of simdBlock, float32 partial sums per lane
// inside a block. The fold of block b also computes the maximum of block b+1, so the next
// block streams in from memory while this one computes. The maximum kernels ignore NaN; a NaN
// in a block the fold visits makes s NaN, and a block whose maximum is -Inf is scanned for NaN
// here.
func rowStatsSIMD(k *lpSIMD, r logitRows, i int, temperature float32) (m float32, s, t float64) {
	m = float32(math.Inf(-1))
	scale := temperature != 1
	nbm := k.blockMax(r, i, 0, min(simdBlock, r.v))
	for lo := 0; lo < r.v; lo += simdBlock {
		hi := min(lo+simdBlock, r.v)
		nhi := min(hi+simdBlock, r.v)
		bm := nbm
		if math.IsInf(float64(bm), -1) && r.hasNaN(i, lo, hi) {
			return float32(math.NaN()), math.NaN(), math.NaN()
		}
		if scale {
			bm /= temperature
		}
		if bm > m {
			if s > 0 {
				c := math.Exp(float64(m - bm))
				t = c * (t + s*float64(m-bm))
				s *= c
			}
			m = bm
		}
		if math.IsInf(float64(m), 0) {
			if m > 0 {
				return m, math.NaN(), math.NaN()
			}
			nbm = k.blockMax(r, i, hi, nhi)
			continue
		}
		var bs, bt float32
		bs, bt, nbm = k.fold(r, i, lo, hi, nhi, m, temperature, scale)
		s += float64(bs)
		t += float64(bt)
	}
	return m, s, t
}

// lpSIMD is one vector implementation of the vocabulary-wide loops (logprob_amd64.go). Its
// kernels take whole vectors only (lengths a multiple of lanes); the methods below finish the
// tails in Go.
type lpSIMD struct {
	lanes           int
	max32           func(x []float32) float32
	max16           func(x []uint16) float32
	fold32, fold32s func(x, next []float32, m, temp float32) (s, t, nm float32)
	fold16, fold16s func(x, next []uint16, m, temp float32) (s, t, nm float32)
	// Backward: [scaled] variants, by logits and dlogits dtype.
	bwd32to32 [2]func(out, x []float32, temp, logZ, gl, ge, h, negInvT float32)
	bwd32to16 [2]func(out []uint16, x []float32, temp, logZ, gl, ge, h, negInvT float32)
	bwd16to32 [2]func(out []float32, x []uint16, temp, logZ, gl, ge, h, negInvT float32)
	bwd16to16 [2]func(out, x []uint16, temp, logZ, gl, ge, h, negInvT float32)
	// Non-temporal float32 stores, for out aligned to lanes*4 bytes.
	bwd32to32nt [2]func(out, x []float32, temp, logZ, gl, ge, h, negInvT float32)
	bwd16to32nt [2]func(out []float32, x []uint16, temp, logZ, gl, ge, h, negInvT float32)
}

// ntBytes is the dlogits size from which the backward streams float32 gradients past the
// caches (non-temporal stores): far larger than L2, the output would only evict the logits.
const ntBytes = 32 << 20

// lpImpls lists the implementations of the vocabulary-wide loops this build can run on this
// CPU, best first; the pure-Go one ("go", nil kernels) is always last and is the reference the
// vector kernels are tested against. It is fixed at start-up (simdImpls detects the CPU's
// features); only the package's own tests and benchmarks change the selection (to run every
// implementation), which is the best one otherwise.
var lpImpls = dispatch.New(simdImpls()...)

func (k *lpSIMD) blockMax(r logitRows, i, lo, hi int) float32 {
	n := (hi - lo) &^ (k.lanes - 1)
	if r.f32 != nil {
		x := r.f32[i*r.v+lo : i*r.v+hi]
		bm := k.max32(x[:n])
		for _, v := range x[n:] {
			if v > bm {
				bm = v
			}
		}
		return bm
	}
	x := r.b16[i*r.v+lo : i*r.v+hi]
	bm := k.max16(bf16Bits(x[:n]))
	for _, h := range x[n:] {
		if v := h.Float32(); v > bm {
			bm = v
		}
	}
	return bm
}

// fold folds logits [lo, hi) of row i (see foldKernel in internal/asmgen) and returns the
// maximum of [hi, nhi), the next block (-Inf when empty). nhi-hi <= hi-lo.
func (k *lpSIMD) fold(r logitRows, i, lo, hi, nhi int, m, temperature float32, scale bool) (s, t, nm float32) {
	n := (hi - lo) &^ (k.lanes - 1)
	nn := (nhi - hi) &^ (k.lanes - 1)
	nn = min(nn, n) // the kernels need len(next) <= len(x); blocks never break it
	if r.f32 != nil {
		x := r.f32[i*r.v+lo : i*r.v+hi]
		next := r.f32[i*r.v+hi : i*r.v+nhi]
		if scale {
			s, t, nm = k.fold32s(x[:n], next[:nn], m, temperature)
		} else {
			s, t, nm = k.fold32(x[:n], next[:nn], m, temperature)
		}
		for _, v := range next[nn:] {
			if v > nm {
				nm = v
			}
		}
	} else {
		x := r.u16(i, lo, hi)
		next := r.u16(i, hi, nhi)
		if scale {
			s, t, nm = k.fold16s(x[:n], next[:nn], m, temperature)
		} else {
			s, t, nm = k.fold16(x[:n], next[:nn], m, temperature)
		}
		for _, h := range next[nn:] {
			if v := BF16(h).Float32(); v > nm {
				nm = v
			}
		}
	}
	for j := lo + n; j < hi; j++ {
		u := floorExpArg(r.at(i, j)/temperature - m)
		e := hostops.ExpNonPosTable(u)
		s += e
		t += e * u
	}
	return s, t, nm
}

func checkTargets(op string, ys []int32, v int) error {
	for i, y := range ys {
		if y < 0 || int(y) >= v {
			return Errorf(ErrParam, op, "targets", "element %d is %d, outside the vocabulary [0, %d)", i, y, v)
		}
	}
	return nil
}

func logProbEntropyHost(op string, logp, entropy, logits, targets *Tensor, temperature float32) error {
	rows := newLogitRows(logits)
	ys, _ := targets.Int32s()
	if err := checkTargets(op, ys, rows.v); err != nil {
		return err
	}
	var lp, ent []float32
	if logp != nil {
		lp, _ = logp.Float32s()
	}
	if entropy != nil {
		ent, _ = entropy.Float32s()
	}
	k := lpImpls.Active()
	parallel.For(len(ys), parallel.Grain(rows.v, 1<<16), func(lo, hi int) {
		var scratch []float32
		if k == nil {
			scratch = make([]float32, vocabBlock)
		}
		for i := lo; i < hi; i++ {
			var m float32
			var s, t float64
			if k != nil {
				m, s, t = rowStatsSIMD(k, rows, i, temperature)
			} else {
				m, s, t = rowStats(rows, i, temperature, scratch)
			}
			logS := math.Log(s)
			if lp != nil {
				zy := rows.at(i, int(ys[i])) / temperature
				v := float64(zy-m) - logS
				lp[i] = float32(max(v, -math.MaxFloat32))
			}
			if ent != nil {
				ent[i] = float32(logS - t/s)
			}
		}
	})
	return nil
}

func logProbEntropyBackwardHost(op string, dlogits, logits, targets, logp, entropy, dlogp, dentropy *Tensor, temperature float32) error {
	rows := newLogitRows(logits)
	v := rows.v
	ys, _ := targets.Int32s()
	if err := checkTargets(op, ys, v); err != nil {
		return err
	}
	lp, _ := logp.Float32s()
	var ent, dlp, dent []float32
	if entropy != nil {
		ent, _ = entropy.Float32s()
	}
	if dlogp != nil {
		dlp, _ = dlogp.Float32s()
	}
	if dentropy != nil {
		dent, _ = dentropy.Float32s()
	}
	var out32 []float32
	var out16 []BF16
	if dlogits.dtype == Float32 {
		out32, _ = dlogits.Float32s()
	} else {
		out16, _ = dlogits.BF16s()
	}
	invT := 1 / temperature
	if k := lpImpls.Active(); k != nil {
		nt := len(out32)*4 >= ntBytes
		parallel.For(len(ys), parallel.Grain(v, 1<<16), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				var gl, ge, h float32
				if dlp != nil {
					gl = dlp[i]
				}
				if dent != nil {
					ge, h = dent[i], ent[i]
				}
				k.backwardRow(out32, out16, rows, i, int(ys[i]), lp[i], gl, ge, h, temperature, nt)
			}
		})
		return nil
	}
	parallel.For(len(ys), parallel.Grain(v, 1<<16), func(lo, hi int) {
		scratch := make([]float32, vocabBlock)
		outScratch := make([]float32, vocabBlock)
		for i := lo; i < hi; i++ {
			var gl, ge, h float32
			if dlp != nil {
				gl = dlp[i]
			}
			if dent != nil {
				ge, h = dent[i], ent[i]
			}
			y := int(ys[i])
			logZ := rows.at(i, y)/temperature - lp[i]
			for blo := 0; blo < v; blo += vocabBlock {
				bhi := min(blo+vocabBlock, v)
				x := rows.block(i, blo, bhi, scratch)
				out := outScratch[:len(x)]
				if out32 != nil {
					out = out32[i*v+blo : i*v+bhi]
				}
				if temperature == 1 {
					gradBlock(out, x, logZ, gl, ge, h)
				} else {
					gradBlockScaled(out, x, logZ, gl, ge, h, temperature)
				}
				if y >= blo && y < bhi {
					out[y-blo] += gl * invT
				}
				if out16 != nil {
					for j, g := range out {
						out16[i*v+blo+j] = BF16FromFloat32(g)
					}
				}
			}
		}
	})
	return nil
}

// backwardRow writes row i of dlogits (out32 or out16) with the vector kernels: the whole
// vectors in assembly, the tail and the target's extra gl/temperature in Go.
func (k *lpSIMD) backwardRow(out32 []float32, out16 []BF16, rows logitRows, i, y int, lpi, gl, ge, h, temperature float32, nt bool) {
	v := rows.v
	invT := 1 / temperature
	logZ := rows.at(i, y)/temperature - lpi
	n := v &^ (k.lanes - 1)
	sc := 0
	if temperature != 1 {
		sc = 1
	}
	lo := i * v
	nt = nt && out32 != nil && n > 0 && uintptr(unsafe.Pointer(&out32[lo]))%uintptr(4*k.lanes) == 0
	switch {
	case nt && rows.f32 != nil:
		k.bwd32to32nt[sc](out32[lo:lo+n], rows.f32[lo:lo+n], temperature, logZ, gl, ge, h, -invT)
	case nt:
		k.bwd16to32nt[sc](out32[lo:lo+n], rows.u16(i, 0, n), temperature, logZ, gl, ge, h, -invT)
	case rows.f32 != nil && out32 != nil:
		k.bwd32to32[sc](out32[lo:lo+n], rows.f32[lo:lo+n], temperature, logZ, gl, ge, h, -invT)
	case rows.f32 != nil:
		k.bwd32to16[sc](bf16Bits(out16[lo:lo+n]), rows.f32[lo:lo+n], temperature, logZ, gl, ge, h, -invT)
	case out32 != nil:
		k.bwd16to32[sc](out32[lo:lo+n], rows.u16(i, 0, n), temperature, logZ, gl, ge, h, -invT)
	default:
		k.bwd16to16[sc](bf16Bits(out16[lo:lo+n]), rows.u16(i, 0, n), temperature, logZ, gl, ge, h, -invT)
	}
	grad := func(j int) float32 {
		u := floorExpArg(rows.at(i, j)/temperature - logZ)
		p := hostops.ExpNonPosTable(u)
		g := (-gl*p - ge*p*(u+h)) * invT
		if j == y {
			g += gl * invT
		}
		return g
	}
	for j := n; j < v; j++ {
		if out32 != nil {
			out32[lo+j] = grad(j)
		} else {
			out16[lo+j] = BF16FromFloat32(grad(j))
		}
	}
	if y < n { // the kernel wrote the target without its 1[v=y] term
		if out32 != nil {
			out32[lo+y] += gl * invT
		} else {
			out16[lo+y] = BF16FromFloat32(grad(y))
		}
	}
}

// floorExpArg keeps exp arguments at or above -87, where hostops.ExpNonPosTable is valid; the
// branch is almost never taken, so it predicts well (Go's float max builtin is branchier, for
// NaN rules).
func floorExpArg(u float32) float32 {
	if u < -87 {
		return -87
	}
	return u
}

// foldBlock adds exp(x-m) into acc[0:2] and exp(x-m)*(x-m) into acc[2:4]. Two lanes: with
// more, Go's register allocator spills the polynomial temporaries.
func foldBlock(acc *[4]float32, x []float32, m float32) {
	s0, s1, t0, t1 := acc[0], acc[1], acc[2], acc[3]
	j := 0
	for ; j+2 <= len(x); j += 2 {
		u0, u1 := floorExpArg(x[j]-m), floorExpArg(x[j+1]-m)
		e0, e1 := hostops.ExpNonPosTable(u0), hostops.ExpNonPosTable(u1)
		s0, s1 = s0+e0, s1+e1
		t0, t1 = t0+e0*u0, t1+e1*u1
	}
	for ; j < len(x); j++ {
		u := floorExpArg(x[j] - m)
		e := hostops.ExpNonPosTable(u)
		s0 += e
		t0 += e * u
	}
	acc[0], acc[1], acc[2], acc[3] = s0, s1, t0, t1
}

// foldBlockScaled is foldBlock on x/temperature (a true division, as the reference divides).
func foldBlockScaled(acc *[4]float32, x []float32, m, temperature float32) {
	s0, s1, t0, t1 := acc[0], acc[1], acc[2], acc[3]
	j := 0
	for ; j+2 <= len(x); j += 2 {
		u0, u1 := floorExpArg(x[j]/temperature-m), floorExpArg(x[j+1]/temperature-m)
		e0, e1 := hostops.ExpNonPosTable(u0), hostops.ExpNonPosTable(u1)
		s0, s1 = s0+e0, s1+e1
		t0, t1 = t0+e0*u0, t1+e1*u1
	}
	for ; j < len(x); j++ {
		u := floorExpArg(x[j]/temperature - m)
		e := hostops.ExpNonPosTable(u)
		s0 += e
		t0 += e * u
	}
	acc[0], acc[1], acc[2], acc[3] = s0, s1, t0, t1
}

// gradBlock writes out = -gl*p - ge*p*(u+h) with u = x - logZ and p = exp(u): the backward of
// one block at temperature 1, without the target's gl term.
func gradBlock(out, x []float32, logZ, gl, ge, h float32) {
	out = out[:len(x)]
	for j, xv := range x {
		u := floorExpArg(xv - logZ)
		p := hostops.ExpNonPosTable(u)
		out[j] = -gl*p - ge*p*(u+h)
	}
}

// gradBlockScaled is gradBlock on x/temperature, times 1/temperature.
func gradBlockScaled(out, x []float32, logZ, gl, ge, h, temperature float32) {
	invT := 1 / temperature
	out = out[:len(x)]
	for j, xv := range x {
		u := floorExpArg(xv/temperature - logZ)
		p := hostops.ExpNonPosTable(u)
		out[j] = (-gl*p - ge*p*(u+h)) * invT
	}
}
