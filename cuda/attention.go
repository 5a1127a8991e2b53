//go:build cuda

package cuda

import (
	"sync/atomic"
	"unsafe"

	"github.com/mtrl-go/mtrl/tensor"
	"gorgonia.org/cu"
)

// Attention (kernels/attention.cu): flash-style forward, decode and backward.
var _ tensor.AttentionKernel = deviceKernels{}

// attnThreads is ATT_THREADS of the kernels.
const attnThreads = 128

// attnMMAMaxD is the largest head dimension of the tensor-core bfloat16 forward
// (attention_mma.cu, ATT_MMA_DM); attnMMARows is its query tile (ATT_MMA_BQ) and the
// backward's key tile (ATT_MMA_BK).
const attnMMAMaxD, attnMMARows = 128, 64

// attnScalarBF16, set by a test only, runs bfloat16 attention on the scalar kernels of
// attention.cu too (the test cross-checks the two).
var attnScalarBF16 atomic.Bool

// attnMMA reports whether attention of head dimension d and element type dt runs on the
// tensor-core kernels (attention_mma.cu).
func attnMMA(d int, dt tensor.DType) bool {
	return dt == tensor.BFloat16 && d <= attnMMAMaxD && !attnScalarBF16.Load()
}

// attnForwardKernel returns the forward kernel for head dimension d and element type dt and its
// query tile: the tensor-core kernel for bfloat16 up to attnMMAMaxD, else the scalar ones.
func attnForwardKernel(op string, d int, dt tensor.DType) (name string, bq int, err error) {
	if attnMMA(d, dt) {
		return "attention_mma_fwd_bf16", attnMMARows, nil
	}
	sfx, bq, err := attnTiles(op, d, dt)
	return "attention_fwd_" + sfx, bq, err
}

// attnTiles returns the kernels' suffix and query tile size for head dimension d and element
// type dt (float32 or bfloat16: the entry point checked it; the forward's key tiles are twice as
// long, the backward's as long).
func attnTiles(op string, d int, dt tensor.DType) (suffix string, bq int, err error) {
	switch {
	case d <= 128:
		return "d128_" + attnDType(dt), 16, nil
	case d <= 256:
		return "d256_" + attnDType(dt), 8, nil
	}
	return "", 0, tensor.Errorf(tensor.ErrParam, op, "Q", "has head dimension %d: the CUDA attention kernels take at most 256", d)
}

// attnDType is the kernels' suffix of element type dt.
func attnDType(dt tensor.DType) string {
	if dt == tensor.BFloat16 {
		return "bf16"
	}
	return "f32"
}

// attnSeqs returns the sequences as the kernels read them, [q0, qn, k0, kn] per sequence, from
// cu_seqlens (the entry point validated them; downloaded unless they are host tensors) or one
// sequence of all rows.
func (b *Backend) attnSeqs(op string, in tensor.AttentionInputs) ([]int32, error) {
	tq, tk := in.Q.Dim(0), in.K.Dim(0)
	if in.CuSeqlensQ == nil {
		return []int32{0, int32(tq), 0, int32(tk)}, nil
	}
	n := in.CuSeqlensQ.Len()
	cq, ck := make([]int32, n), make([]int32, n)
	for i, c := range []struct {
		t   *tensor.Tensor
		dst []int32
	}{{in.CuSeqlensQ, cq}, {in.CuSeqlensK, ck}} {
		if h, err := c.t.Int32s(); err == nil { // held on the host: no read-back
			copy(c.dst, h)
			continue
		}
		p, err := b.ptrOf(op, []string{"CuSeqlensQ", "CuSeqlensK"}[i], c.t)
		if err != nil {
			return nil, err
		}
		if err := b.download(op, unsafe.Pointer(&c.dst[0]), p, n*4); err != nil {
			return nil, err
		}
	}
	seqs := make([]int32, 0, 4*(n-1))
	for i := 1; i < n; i++ {
		seqs = append(seqs, cq[i-1], cq[i]-cq[i-1], ck[i-1], ck[i]-ck[i-1])
	}
	return seqs, nil
}

// uploadSeqs copies seqs to the start of scratch, which holds extra more bytes after them
// (256-aligned), and returns both addresses.
func (b *Backend) uploadSeqs(op string, seqs []int32, extra int64) (cu.DevicePtr, cu.DevicePtr, error) {
	head := int64(ceilDiv(len(seqs)*4, 256) * 256)
	s, err := b.scratchPtr(op, head+extra)
	if err != nil {
		return 0, 0, err
	}
	if len(seqs) > 0 {
		if err := b.upload(op, s, unsafe.Pointer(&seqs[0]), len(seqs)*4); err != nil {
			return 0, 0, err
		}
	}
	return s, s + cu.DevicePtr(head), nil
}

// maxOf returns the largest of seqs[i], seqs[i+4], … (0 for none).
func maxOf(seqs []int32, i int) int {
	m := 0
	for ; i < len(seqs); i += 4 {
		m = max(m, int(seqs[i]))
	}
	return m
}

// launchPerSeq launches kernel name with grid (tiles, sequences·heads), in chunks of sequences
// that keep the grid's y within 65535; args[seqArg] is the address of the sequences, advanced
// per chunk.
func (b *Backend) launchPerSeq(op, name string, tiles, nseq, heads int, seqArg int, args ...arg) error {
	if tiles == 0 {
		return nil
	}
	per := max(1, 65535/heads)
	base := args[seqArg]
	for s0 := 0; s0 < nseq; s0 += per {
		n := min(per, nseq-s0)
		args[seqArg] = base + arg(s0*16)
		if err := b.launch(op, name, tiles, n*heads, attnThreads, 0, args...); err != nil {
			return err
		}
	}
	return nil
}

// Attention is the flash-style forward: one block per tile of queries and head.
func (b deviceKernels) Attention(out, lse *tensor.Tensor, in tensor.AttentionInputs, cfg tensor.AttentionConfig) error {
	const op = "tensor.Attention"
	return b.do(op, func() error {
		seqs, err := b.attnSeqs(op, in)
		if err != nil {
			return err
		}
		return b.attnForward(op, out, lse, in.Q, in.K, in.V, seqs, cfg)
	})
}

func (b *Backend) attnForward(op string, out, lse, q, k, v *tensor.Tensor, seqs []int32, cfg tensor.AttentionConfig) error {
	hq, hkv, d := q.Dim(-2), k.Dim(-2), q.Dim(-1)
	name, bq, err := attnForwardKernel(op, d, q.DType())
	if err != nil {
		return err
	}
	p, err := b.ptrs(op, []string{"out", "lse", "Q", "K", "V"}, out, lse, q, k, v)
	if err != nil {
		return err
	}
	s, _, err := b.uploadSeqs(op, seqs, 0)
	if err != nil {
		return err
	}
	return b.launchPerSeq(op, name, ceilDiv(maxOf(seqs, 1), bq), len(seqs)/4, hq, 5,
		ptrArg(p[0]), ptrArg(p[1]), ptrArg(p[2]), ptrArg(p[3]), ptrArg(p[4]), ptrArg(s),
		intArg(hq), intArg(hkv), intArg(d), f32Arg(cfg.Scale), boolArg(cfg.Causal))
}

// AttentionDecode is the forward over each sequence's cache: sequence b's queries are rows
// [b·Tn, (b+1)·Tn) and its keys the first Lens[b] rows of its cache.
func (b deviceKernels) AttentionDecode(out *tensor.Tensor, in tensor.DecodeInputs, cfg tensor.AttentionConfig) error {
	const op = "tensor.AttentionDecode"
	bn, tn, sMax := in.Q.Dim(0), in.Q.Dim(1), in.KCache.Dim(1)
	return b.do(op, func() error {
		lens := make([]int32, bn)
		if h, err := in.Lens.Int32s(); err == nil { // held on the host: no read-back
			copy(lens, h)
		} else if bn > 0 {
			p, err := b.ptrOf(op, "Lens", in.Lens)
			if err != nil {
				return err
			}
			if err := b.download(op, unsafe.Pointer(&lens[0]), p, bn*4); err != nil {
				return err
			}
		}
		seqs := make([]int32, 0, 4*bn)
		for i, l := range lens {
			seqs = append(seqs, int32(i*tn), int32(tn), int32(i*sMax), l)
		}
		return b.attnForward(op, out, nil, in.Q, in.KCache, in.VCache, seqs, cfg)
	})
}

// KVCacheWrite copies the new rows into the caches in one kernel.
func (b deviceKernels) KVCacheWrite(cache, kv, starts *tensor.Tensor) error {
	bn, sMax, tn := cache.Dim(0), cache.Dim(1), kv.Dim(1)
	row := cache.Dim(2) * cache.Dim(3)
	return b.elementwiseOp("tensor.KVCacheWrite", "attention_kvwrite_fwd_"+attnDType(cache.DType()), []*tensor.Tensor{cache, kv, starts}, bn*tn*row,
		intArg(bn), intArg(sMax), intArg(tn), intArg(row))
}

// AttentionBackward: D_i = dO_i·O_i per row, then dQ one block per query tile and head, and dK,
// dV one block per key tile and key/value head (the group's query heads in order): every
// gradient element is written by one thread, no atomics. bfloat16 up to head dimension
// attnMMAMaxD runs the tensor-core kernels.
func (b deviceKernels) AttentionBackward(dq, dk, dv *tensor.Tensor, in tensor.AttentionGrad, cfg tensor.AttentionConfig) error {
	const op = "tensor.AttentionBackward"
	hq, hkv, d := in.Q.Dim(-2), in.K.Dim(-2), in.Q.Dim(-1)
	dt := in.Q.DType()
	sfx, bq, err := attnTiles(op, d, dt)
	if err != nil {
		return err
	}
	bk := bq // the backward's tiles are square: 16 × 16 at d128, 8 × 8 at d256
	dqName, dkdvName := "attention_dq_bwd_"+sfx, "attention_dkdv_bwd_"+sfx
	if attnMMA(d, dt) { // the tensor-core kernels: 64 queries, 64 keys a block
		dqName, dkdvName, bq, bk = "attention_mma_dq_bwd_bf16", "attention_mma_dkdv_bwd_bf16", attnMMARows, attnMMARows
	}
	rows := in.Q.Dim(0) * hq
	return b.do(op, func() error {
		seqs, err := b.attnSeqs(op, in.AttentionInputs)
		if err != nil {
			return err
		}
		p, err := b.ptrs(op, []string{"dq", "dk", "dv", "Q", "K", "V", "Out", "LSE", "DOut"},
			dq, dk, dv, in.Q, in.K, in.V, in.Out, in.LSE, in.DOut)
		if err != nil {
			return err
		}
		s, delta, err := b.uploadSeqs(op, seqs, int64(max(1, rows))*4)
		if err != nil {
			return err
		}
		// Keys no query sees get zero gradients: clear dK and dV, which the kernels skip there.
		for _, t := range []struct {
			p cu.DevicePtr
			n int
		}{{p[1], dk.Len()}, {p[2], dv.Len()}} {
			if t.n > 0 {
				if err := cu.MemsetD8Async(t.p, 0, int64(t.n*dt.Size()), b.stream); err != nil {
					return devErr(op, "cuMemsetD8Async", "", err)
				}
			}
		}
		if rows == 0 {
			return nil
		}
		if err := b.launch(op, "attention_delta_bwd_"+attnDType(dt), ceilDiv(rows, blockSize), 1, blockSize, 0,
			ptrArg(delta), ptrArg(p[6]), ptrArg(p[8]), intArg(rows), intArg(d)); err != nil {
			return err
		}
		if err := b.launchPerSeq(op, dqName, ceilDiv(maxOf(seqs, 1), bq), len(seqs)/4, hq, 7,
			ptrArg(p[0]), ptrArg(p[3]), ptrArg(p[4]), ptrArg(p[5]), ptrArg(p[8]), ptrArg(p[7]), ptrArg(delta), ptrArg(s),
			intArg(hq), intArg(hkv), intArg(d), f32Arg(cfg.Scale), boolArg(cfg.Causal)); err != nil {
			return err
		}
		return b.launchPerSeq(op, dkdvName, ceilDiv(maxOf(seqs, 3), bk), len(seqs)/4, hkv, 8,
			ptrArg(p[1]), ptrArg(p[2]), ptrArg(p[3]), ptrArg(p[4]), ptrArg(p[5]), ptrArg(p[8]), ptrArg(p[7]), ptrArg(delta), ptrArg(s),
			intArg(hq), intArg(hkv), intArg(d), f32Arg(cfg.Scale), boolArg(cfg.Causal))
	})
}
