package tensor

import (
	"github.com/mtrl-go/mtrl/internal/nnref"
	"github.com/mtrl-go/mtrl/internal/parallel"
)

// EmbeddingKernel is implemented by backends with their own embedding gather and scatter-add.
type EmbeddingKernel interface {
	Embedding(y, table, ids *Tensor) error
	EmbeddingBackward(dtable *Tensor, in EmbeddingGrad) error
}

// checkIDs returns an ErrParam error naming the first id outside [0, v). It reads the ids on
// the host (a download for device tensors: ids are small).
func checkIDs(op, arg string, ids *Tensor, v int) error {
	return OnHost(0, []*Tensor{ids}, func(h []*Tensor) error {
		for i, id := range hostI32(h[0]) {
			if id < 0 || int(id) >= v {
				return Errorf(ErrParam, op, arg, "element %d is %d, outside [0, %d)", i, id, v)
			}
		}
		return nil
	})
}

// checkEmbedding checks the gathered or added rows (an activation: float32 or bfloat16), the
// table (gather: float32 or the rows' dtype; scatter-add: the float32 gradient) and the ids.
func checkEmbedding(op string, rows, table, ids *Tensor, names []string, grad bool) error {
	if err := checkNonNil(op, names, rows, table, ids); err != nil {
		return err
	}
	act, err := checkActs(op, names[:1], rows)
	if err != nil {
		return err
	}
	if grad {
		err = checkF32(op, names[1:2], table)
	} else {
		err = checkParams(op, act, names[1:2], table)
	}
	if err != nil {
		return err
	}
	if err := CheckDType(op, names[2], ids, Int32); err != nil {
		return err
	}
	if err := CheckShape(op, names[1], table, -1, -1); err != nil {
		return err
	}
	if err := CheckShape(op, names[0], rows, append(append([]int{}, ids.shape...), table.Dim(1))...); err != nil {
		return err
	}
	if err := CheckSameBackend(op, names, rows, table, ids); err != nil {
		return err
	}
	return checkIDs(op, names[2], ids, table.Dim(0))
}

// Embedding writes row ids[i] of table [V, D] into y [..., D] for int32 ids [...]; an id
// outside [0, V) is an ErrParam error. y is float32 or bfloat16 and table float32 or y's dtype:
// a float32 table's rows are rounded to a bfloat16 y, a bfloat16 one's copied.
func Embedding(y, table, ids *Tensor) error {
	const op = "tensor.Embedding"
	if err := checkEmbedding(op, y, table, ids, []string{"y", "table", "ids"}, false); err != nil {
		return err
	}
	if k, ok := KernelOf[EmbeddingKernel](y.Backend()); ok {
		return k.Embedding(y, table, ids)
	}
	return OnHost(1, []*Tensor{y, table, ids}, func(h []*Tensor) error {
		d, idv := table.Dim(1), hostI32(h[2])
		if y.dtype == Float32 {
			nnref.Embedding(d, hostF32(h[1]), idv, hostF32(h[0]))
			return nil
		}
		yv, tv := viewOf(h[0]), viewOf(h[1])
		parallel.For(len(idv), parallel.Grain(d, 1<<14), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				dst, id := yv.b[i*d:i*d+d], int(idv[i])
				if tv.b16 {
					copy(dst, tv.b[id*d:id*d+d])
				} else {
					roundBF16(dst, tv.f[id*d:id*d+d])
				}
			}
		})
		return nil
	})
}

// EmbeddingGrad is what EmbeddingBackward reads.
type EmbeddingGrad struct {
	IDs, DY *Tensor
	// Accumulate adds into dtable instead of overwriting it.
	Accumulate bool
}

// EmbeddingBackward scatter-adds DY [..., D] (float32 or bfloat16) into the rows ids of the
// float32 dtable [V, D]; repeated ids add up in float32 in ascending order of their position, so
// the result is deterministic.
func EmbeddingBackward(dtable *Tensor, in EmbeddingGrad) error {
	const op = "tensor.EmbeddingBackward"
	if err := checkEmbedding(op, in.DY, dtable, in.IDs, []string{"DY", "dtable", "IDs"}, true); err != nil {
		return err
	}
	if k, ok := KernelOf[EmbeddingKernel](dtable.Backend()); ok {
		return k.EmbeddingBackward(dtable, in)
	}
	return OnHost(1, []*Tensor{dtable, in.IDs, in.DY}, func(h []*Tensor) error {
		d, idv, dt := dtable.Dim(1), hostI32(h[1]), hostF32(h[0])
		if in.DY.dtype == Float32 {
			nnref.EmbeddingBackward(d, idv, hostF32(h[2]), dt, in.Accumulate)
			return nil
		}
		// nnref.EmbeddingBackward's order (column blocks in parallel, the ids in order within
		// each), widening each bfloat16 gradient as it is added.
		dy := viewOf(h[2]).b
		if !in.Accumulate {
			clear(dt)
		}
		parallel.For(d, 256, func(lo, hi int) {
			for i, id := range idv {
				dst, src := dt[int(id)*d+lo:int(id)*d+hi], dy[i*d+lo:i*d+hi]
				for j, g := range src {
					dst[j] += g.Float32()
				}
			}
		})
		return nil
	})
}
