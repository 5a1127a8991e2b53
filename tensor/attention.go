package tensor

import (
	"math"

	"github.com/mtrl-go/mtrl/internal/nnref"
)

// AttentionConfig configures scaled dot-product attention.
type AttentionConfig struct {
	// Causal lets query i of a sequence with QN queries and KN keys see keys j <= i + KN − QN:
	// the queries are the sequence's last positions (prefill when QN = KN, decoding with a cache
	// otherwise). Without it every query sees every key of its sequence.
	Causal bool
	// Scale multiplies the scores before the softmax; > 0. DefaultAttentionConfig sets the
	// usual 1/sqrt(head dimension).
	Scale float32
}

// DefaultAttentionConfig returns the configuration of a model's attention: scale 1/sqrt(headDim).
func DefaultAttentionConfig(headDim int, causal bool) AttentionConfig {
	return AttentionConfig{Causal: causal, Scale: float32(1 / math.Sqrt(float64(headDim)))}
}

// AttentionInputs are the tensors of Attention: queries, keys and values in the packed
// [tokens, heads, head dim] layout of the projections' outputs. Hq query heads share Hkv
// key/value heads (grouped-query attention, Hq a multiple of Hkv): query head h reads key/value
// head h/(Hq/Hkv).
//
// Q, K, V and the outputs (out; dq, dk, dv and Out, DOut in the backward; the KV caches of
// decoding) share one dtype, float32 or bfloat16; lse is float32 either way. With bfloat16 the
// scores, the online softmax and every sum are float32, and each output is rounded to the
// nearest bfloat16 (ties to even) once, when it is stored: the float32 computation on the
// widened inputs, rounded.
type AttentionInputs struct {
	Q    *Tensor // [Tq, Hq, D], float32 or bfloat16
	K, V *Tensor // [Tk, Hkv, D], Q's dtype
	// CuSeqlensQ and CuSeqlensK (int32 [B+1], both or neither) pack B variable-length sequences
	// without padding: sequence b is query rows [CuSeqlensQ[b], CuSeqlensQ[b+1]) and key rows
	// [CuSeqlensK[b], CuSeqlensK[b+1]); each starts at 0, never decreases and ends at Tq (Tk).
	// Nil: one sequence of all rows. They may be host tensors while Q, K and V are on a device:
	// then nothing is copied back to validate or read them.
	CuSeqlensQ, CuSeqlensK *Tensor
}

// AttentionKernel is implemented by backends with their own attention. Attention's lse may be
// nil (inference). The entry points have validated the call, dtypes included: the operands and
// outputs are all float32 or all bfloat16 (see AttentionInputs), lse float32.
type AttentionKernel interface {
	Attention(out, lse *Tensor, in AttentionInputs, cfg AttentionConfig) error
	AttentionBackward(dq, dk, dv *Tensor, in AttentionGrad, cfg AttentionConfig) error
	AttentionDecode(out *Tensor, in DecodeInputs, cfg AttentionConfig) error
	KVCacheWrite(cache, kv, starts *Tensor) error
}

// Attention writes out [Tq, Hq, D] = softmax(Q·Kᵀ·scale)·V for every sequence and query head.
// The kernel is flash-style: it scores one tile of keys at a time with an online softmax
// (running max and sum), so no [Tq, Tk] matrix exists. A causal query that sees no key (more
// queries than keys) gets zeros.
func Attention(out *Tensor, in AttentionInputs, cfg AttentionConfig) error {
	return attention("tensor.Attention", out, nil, in, cfg)
}

// AttentionLSE is Attention that also writes lse [Tq, Hq] (float32, whatever Q's dtype), the log-sum-exp of each
// query's scaled scores, which AttentionBackward needs (−Inf for a query that sees no key).
func AttentionLSE(out, lse *Tensor, in AttentionInputs, cfg AttentionConfig) error {
	if lse == nil {
		return Errorf(ErrShape, "tensor.AttentionLSE", "lse", "is nil (use Attention)")
	}
	return attention("tensor.AttentionLSE", out, lse, in, cfg)
}

// attnDType checks that ts[0] is float32 or bfloat16 and every other non-nil tensor of ts has
// its dtype: the operands and outputs of one attention call share their dtype (lse excepted).
func attnDType(op string, names []string, ts ...*Tensor) error {
	if err := CheckDType(op, names[0], ts[0], Float32, BFloat16); err != nil {
		return err
	}
	for i, t := range ts[1:] {
		if t == nil {
			continue
		}
		if err := CheckTensor(op, names[i+1], t); err != nil {
			return err
		}
		if t.dtype != ts[0].dtype {
			return Errorf(ErrDType, op, names[i+1], "is %v, %s is %v (the operands and outputs of attention share one dtype, float32 or bfloat16)",
				t.dtype, names[0], ts[0].dtype)
		}
	}
	return nil
}

// attnGeometry validates q, k, v and cfg and returns the shape of the call.
func attnGeometry(op string, q, k, v *Tensor, cfg AttentionConfig) (nnref.AttnShape, error) {
	var s nnref.AttnShape
	names := []string{"Q", "K", "V"}
	if err := checkNonNil(op, names, q, k, v); err != nil {
		return s, err
	}
	if err := attnDType(op, names, q, k, v); err != nil {
		return s, err
	}
	if err := CheckSameBackend(op, names, q, k, v); err != nil {
		return s, err
	}
	if q.Rank() < 3 || k.Rank() != q.Rank() {
		return s, Errorf(ErrShape, op, "Q", "has shape %v and K %v, want [..., T, heads, D] of one rank", q.shape, k.shape)
	}
	if err := CheckSameShape(op, "K", k, "V", v); err != nil {
		return s, err
	}
	s = nnref.AttnShape{Hq: q.Dim(-2), Hkv: k.Dim(-2), D: q.Dim(-1), Causal: cfg.Causal, Scale: float64(cfg.Scale)}
	if k.Dim(-1) != s.D {
		return s, Errorf(ErrShape, op, "K", "has head dimension %d, Q has %d", k.Dim(-1), s.D)
	}
	if s.Hkv == 0 || s.Hq%s.Hkv != 0 {
		return s, Errorf(ErrShape, op, "K", "has %d heads, want a divisor of Q's %d", s.Hkv, s.Hq)
	}
	if !(cfg.Scale > 0) || math.IsInf(float64(cfg.Scale), 1) {
		return s, Errorf(ErrParam, op, "cfg.Scale", "is %v, want a finite value > 0 (DefaultAttentionConfig sets 1/sqrt(D))", cfg.Scale)
	}
	return s, nil
}

// checkIndexBackend checks that the index arrays idx (names; nil ones skipped) are on ref's
// backend or in host memory. Host index arrays on a device are the caller saying it holds them
// on the host: validating them, and a device kernel's reading them, then copy nothing back.
func checkIndexBackend(op, refName string, ref *Tensor, names []string, idx ...*Tensor) error {
	for i, t := range idx {
		if t == nil || isHost(t) {
			continue
		}
		if err := CheckSameBackend(op, []string{refName, names[i]}, ref, t); err != nil {
			return err
		}
	}
	return nil
}

// attnSeqs validates the cu_seqlens of in and returns its sequences.
func attnSeqs(op string, in AttentionInputs) ([]nnref.Seq, error) {
	tq, tk := in.Q.Dim(0), in.K.Dim(0)
	if (in.CuSeqlensQ == nil) != (in.CuSeqlensK == nil) {
		return nil, Errorf(ErrShape, op, "CuSeqlensK", "is given without CuSeqlensQ or the other way round (both or neither)")
	}
	if in.CuSeqlensQ == nil {
		return []nnref.Seq{{Q0: 0, QN: tq, K0: 0, KN: tk}}, nil
	}
	var cq, ck []int32
	for _, c := range []struct {
		name string
		t    *Tensor
		rows int
		dst  *[]int32
	}{{"CuSeqlensQ", in.CuSeqlensQ, tq, &cq}, {"CuSeqlensK", in.CuSeqlensK, tk, &ck}} {
		if err := CheckDType(op, c.name, c.t, Int32); err != nil {
			return nil, err
		}
		if err := CheckShape(op, c.name, c.t, -1); err != nil {
			return nil, err
		}
		if c.t.Len() < 1 {
			return nil, Errorf(ErrShape, op, c.name, "is empty, want [B+1]")
		}
		err := OnHost(0, []*Tensor{c.t}, func(h []*Tensor) error {
			*c.dst = append([]int32(nil), hostI32(h[0])...)
			return nil
		})
		if err != nil {
			return nil, err
		}
		v := *c.dst
		if v[0] != 0 || int(v[len(v)-1]) != c.rows {
			return nil, Errorf(ErrParam, op, c.name, "runs from %d to %d, want 0 to %d", v[0], v[len(v)-1], c.rows)
		}
		for i := 1; i < len(v); i++ {
			if v[i] < v[i-1] {
				return nil, Errorf(ErrParam, op, c.name, "decreases at %d (%d after %d)", i, v[i], v[i-1])
			}
		}
	}
	if len(cq) != len(ck) {
		return nil, Errorf(ErrShape, op, "CuSeqlensK", "has %d entries, CuSeqlensQ has %d", len(ck), len(cq))
	}
	seqs := make([]nnref.Seq, len(cq)-1)
	for b := range seqs {
		seqs[b] = nnref.Seq{Q0: int(cq[b]), QN: int(cq[b+1] - cq[b]), K0: int(ck[b]), KN: int(ck[b+1] - ck[b])}
	}
	return seqs, nil
}

func attention(op string, out, lse *Tensor, in AttentionInputs, cfg AttentionConfig) error {
	s, err := attnGeometry(op, in.Q, in.K, in.V, cfg)
	if err != nil {
		return err
	}
	if err := CheckShape(op, "Q", in.Q, -1, -1, -1); err != nil {
		return err
	}
	if err := CheckSameShape(op, "Q", in.Q, "out", out); err != nil {
		return err
	}
	if lse != nil {
		if err := CheckShape(op, "lse", lse, in.Q.Dim(0), s.Hq); err != nil {
			return err
		}
	}
	names := []string{"out", "lse", "Q"}
	ts := []*Tensor{out, lse, in.Q}
	if err := attnDType(op, []string{"Q", "out"}, in.Q, out); err != nil {
		return err
	}
	if err := checkF32(op, names[1:2], lse); err != nil {
		return err
	}
	if err := CheckSameBackend(op, names, ts...); err != nil {
		return err
	}
	if err := checkIndexBackend(op, "out", out, []string{"CuSeqlensQ", "CuSeqlensK"}, in.CuSeqlensQ, in.CuSeqlensK); err != nil {
		return err
	}
	seqs, err := attnSeqs(op, in)
	if err != nil {
		return err
	}
	if k, ok := KernelOf[AttentionKernel](out.Backend()); ok {
		return k.Attention(out, lse, in, cfg)
	}
	return OnHost(2, []*Tensor{out, lse, in.Q, in.K, in.V}, func(h []*Tensor) error {
		if h[0].dtype == BFloat16 {
			attentionCPU(s, seqs, attnBF16(h[2]), attnBF16(h[3]), attnBF16(h[4]), attnBF16(h[0]), hostF32(h[1]))
		} else {
			attentionCPU(s, seqs, hostF32(h[2]), hostF32(h[3]), hostF32(h[4]), hostF32(h[0]), hostF32(h[1]))
		}
		return nil
	})
}

// AttentionGrad is what AttentionBackward reads: the forward's inputs, its outputs Out and LSE
// (from AttentionLSE) and the gradient DOut flowing into Out.
type AttentionGrad struct {
	AttentionInputs
	Out, LSE, DOut *Tensor
}

// AttentionBackward writes dq, dk and dv (overwritten; the shapes of Q, K and V) for Attention,
// recomputing each probability from LSE as it needs it (no [Tq, Tk] matrix). The
// gradients of the query heads that share a key/value head are summed in a fixed order.
func AttentionBackward(dq, dk, dv *Tensor, in AttentionGrad, cfg AttentionConfig) error {
	const op = "tensor.AttentionBackward"
	s, err := attnGeometry(op, in.Q, in.K, in.V, cfg)
	if err != nil {
		return err
	}
	if err := CheckShape(op, "Q", in.Q, -1, -1, -1); err != nil {
		return err
	}
	names := []string{"dq", "dk", "dv", "Out", "LSE", "DOut"}
	ts := []*Tensor{dq, dk, dv, in.Out, in.LSE, in.DOut}
	if err := checkNonNil(op, names, ts...); err != nil {
		return err
	}
	if err := attnDType(op, []string{"Q", "dq", "dk", "dv", "Out", "DOut"}, in.Q, dq, dk, dv, in.Out, in.DOut); err != nil {
		return err
	}
	if err := checkF32(op, names[4:5], in.LSE); err != nil {
		return err
	}
	for _, c := range []struct {
		name string
		t    *Tensor
		like *Tensor
	}{{"dq", dq, in.Q}, {"dk", dk, in.K}, {"dv", dv, in.V}, {"Out", in.Out, in.Q}, {"DOut", in.DOut, in.Q}} {
		if err := CheckSameShape(op, "Q/K/V", c.like, c.name, c.t); err != nil {
			return err
		}
	}
	if err := CheckShape(op, "LSE", in.LSE, in.Q.Dim(0), s.Hq); err != nil {
		return err
	}
	all := append(ts, in.Q, in.K, in.V)
	if err := CheckSameBackend(op, append(names, "Q", "K", "V"), all...); err != nil {
		return err
	}
	if err := checkIndexBackend(op, "dq", dq, []string{"CuSeqlensQ", "CuSeqlensK"}, in.CuSeqlensQ, in.CuSeqlensK); err != nil {
		return err
	}
	seqs, err := attnSeqs(op, in.AttentionInputs)
	if err != nil {
		return err
	}
	if k, ok := KernelOf[AttentionKernel](dq.Backend()); ok {
		return k.AttentionBackward(dq, dk, dv, in, cfg)
	}
	return OnHost(3, []*Tensor{dq, dk, dv, in.Q, in.K, in.V, in.Out, in.LSE, in.DOut}, func(h []*Tensor) error {
		if h[0].dtype == BFloat16 {
			attentionBackwardCPU(s, seqs, attnBF16(h[3]), attnBF16(h[4]), attnBF16(h[5]), attnBF16(h[6]), hostF32(h[7]),
				attnBF16(h[8]), attnBF16(h[0]), attnBF16(h[1]), attnBF16(h[2]))
		} else {
			attentionBackwardCPU(s, seqs, hostF32(h[3]), hostF32(h[4]), hostF32(h[5]), hostF32(h[6]), hostF32(h[7]),
				hostF32(h[8]), hostF32(h[0]), hostF32(h[1]), hostF32(h[2]))
		}
		return nil
	})
}

// DecodeInputs are the tensors of AttentionDecode: a batch of B sequences, each with Tn new
// queries and a key/value cache of up to S positions.
type DecodeInputs struct {
	Q              *Tensor // [B, Tn, Hq, D], float32 or bfloat16
	KCache, VCache *Tensor // [B, S, Hkv, D], Q's dtype; KVCacheWrite fills them
	// Lens (int32 [B]) is how many cache positions of each sequence are valid, the new tokens'
	// included: Tn <= Lens[b] <= S. It may be a host tensor while the rest are on a device.
	Lens *Tensor
}

// AttentionDecode writes out [B, Tn, Hq, D]: the attention of each sequence's Tn new queries
// over the first Lens[b] positions of its cache, the queries being the last Tn of them (causal
// among themselves when cfg.Causal). It is the generation step of a model with a KV cache.
func AttentionDecode(out *Tensor, in DecodeInputs, cfg AttentionConfig) error {
	const op = "tensor.AttentionDecode"
	s, err := attnGeometry(op, in.Q, in.KCache, in.VCache, cfg)
	if err != nil {
		return err
	}
	if err := CheckShape(op, "Q", in.Q, -1, -1, -1, -1); err != nil {
		return err
	}
	b, tn, sMax := in.Q.Dim(0), in.Q.Dim(1), in.KCache.Dim(1)
	if err := CheckShape(op, "KCache", in.KCache, b, -1, -1, -1); err != nil {
		return err
	}
	if err := CheckSameShape(op, "Q", in.Q, "out", out); err != nil {
		return err
	}
	if err := checkNonNil(op, []string{"Lens"}, in.Lens); err != nil {
		return err
	}
	if err := CheckDType(op, "Lens", in.Lens, Int32); err != nil {
		return err
	}
	if err := CheckShape(op, "Lens", in.Lens, b); err != nil {
		return err
	}
	if err := attnDType(op, []string{"Q", "out"}, in.Q, out); err != nil {
		return err
	}
	if err := CheckSameBackend(op, []string{"out", "Q", "KCache", "VCache"}, out, in.Q, in.KCache, in.VCache); err != nil {
		return err
	}
	if err := checkIndexBackend(op, "out", out, []string{"Lens"}, in.Lens); err != nil {
		return err
	}
	var lens []int32
	err = OnHost(0, []*Tensor{in.Lens}, func(h []*Tensor) error {
		lens = append([]int32(nil), hostI32(h[0])...)
		return nil
	})
	if err != nil {
		return err
	}
	seqs := make([]nnref.Seq, b)
	for i, l := range lens {
		if int(l) < tn || int(l) > sMax {
			return Errorf(ErrParam, op, "Lens", "element %d is %d, want a value in [Tn, S] = [%d, %d]", i, l, tn, sMax)
		}
		seqs[i] = nnref.Seq{Q0: i * tn, QN: tn, K0: i * sMax, KN: int(l)}
	}
	if k, ok := KernelOf[AttentionKernel](out.Backend()); ok {
		return k.AttentionDecode(out, in, cfg)
	}
	return OnHost(1, []*Tensor{out, in.Q, in.KCache, in.VCache}, func(h []*Tensor) error {
		if h[0].dtype == BFloat16 {
			attentionCPU(s, seqs, attnBF16(h[1]), attnBF16(h[2]), attnBF16(h[3]), attnBF16(h[0]), nil)
		} else {
			attentionCPU(s, seqs, hostF32(h[1]), hostF32(h[2]), hostF32(h[3]), hostF32(h[0]), nil)
		}
		return nil
	})
}

// KVCacheWrite copies kv [B, Tn, H, D] into positions [starts[b], starts[b]+Tn) of cache
// [B, S, H, D] (float32 or bfloat16, both of one dtype: a copy, never a conversion; starts
// int32 [B], each in [0, S−Tn]).
func KVCacheWrite(cache, kv, starts *Tensor) error {
	const op = "tensor.KVCacheWrite"
	names := []string{"cache", "kv", "starts"}
	if err := checkNonNil(op, names, cache, kv, starts); err != nil {
		return err
	}
	if err := attnDType(op, names[:2], cache, kv); err != nil {
		return err
	}
	if err := CheckDType(op, "starts", starts, Int32); err != nil {
		return err
	}
	if err := CheckShape(op, "cache", cache, -1, -1, -1, -1); err != nil {
		return err
	}
	b, sMax, h, d := cache.Dim(0), cache.Dim(1), cache.Dim(2), cache.Dim(3)
	if err := CheckShape(op, "kv", kv, b, -1, h, d); err != nil {
		return err
	}
	if err := CheckShape(op, "starts", starts, b); err != nil {
		return err
	}
	if err := CheckSameBackend(op, names, cache, kv, starts); err != nil {
		return err
	}
	tn := kv.Dim(1)
	var st []int32
	err := OnHost(0, []*Tensor{starts}, func(hs []*Tensor) error {
		st = append([]int32(nil), hostI32(hs[0])...)
		return nil
	})
	if err != nil {
		return err
	}
	for i, s := range st {
		if s < 0 || int(s)+tn > sMax {
			return Errorf(ErrParam, op, "starts", "element %d is %d, want a value in [0, S−Tn] = [0, %d]", i, s, sMax-tn)
		}
	}
	if k, ok := KernelOf[AttentionKernel](cache.Backend()); ok {
		return k.KVCacheWrite(cache, kv, starts)
	}
	row := h * d
	for i, s := range st { // one copy per sequence: Copy works on every backend
		dst, err := cache.Rows(i, i+1)
		if err != nil {
			return err
		}
		dst, _ = dst.Reshape(sMax * row)
		src, _ := kv.Rows(i, i+1)
		src, _ = src.Reshape(tn * row)
		if err := copyRange(dst, int(s)*row, src); err != nil {
			return err
		}
	}
	return nil
}

// copyRange copies all of src into dst starting at element off (same dtype and backend).
func copyRange(dst *Tensor, off int, src *Tensor) error {
	sz := dst.dtype.Size()
	return dst.Backend().Copy(dst.store, (dst.offset+off)*sz, src.store, src.offset*sz, src.n*sz)
}

// attnBF16 returns a host bfloat16 tensor's elements (nil for a nil tensor).
func attnBF16(t *Tensor) []BF16 {
	if t == nil {
		return nil
	}
	v, _ := t.BF16s()
	return v
}
