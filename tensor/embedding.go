package tensor

import "github.com/mtrl-go/mtrl/internal/nnref"

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

func checkEmbedding(op string, rows, table, ids *Tensor, names []string) error {
	if err := checkNonNil(op, names, rows, table, ids); err != nil {
		return err
	}
	if err := checkF32(op, names[:2], rows, table); err != nil {
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
// outside [0, V) is an ErrParam error.
func Embedding(y, table, ids *Tensor) error {
	const op = "tensor.Embedding"
	if err := checkEmbedding(op, y, table, ids, []string{"y", "table", "ids"}); err != nil {
		return err
	}
	if k, ok := KernelOf[EmbeddingKernel](y.Backend()); ok {
		return k.Embedding(y, table, ids)
	}
	return OnHost(1, []*Tensor{y, table, ids}, func(h []*Tensor) error {
		nnref.Embedding(table.Dim(1), hostF32(h[1]), hostI32(h[2]), hostF32(h[0]))
		return nil
	})
}

// EmbeddingGrad is what EmbeddingBackward reads.
type EmbeddingGrad struct {
	IDs, DY *Tensor
	// Accumulate adds into dtable instead of overwriting it.
	Accumulate bool
}

// EmbeddingBackward scatter-adds DY [..., D] into the rows ids of dtable [V, D]; repeated ids add
// up in ascending order of their position, so the result is deterministic.
func EmbeddingBackward(dtable *Tensor, in EmbeddingGrad) error {
	const op = "tensor.EmbeddingBackward"
	if err := checkEmbedding(op, in.DY, dtable, in.IDs, []string{"DY", "dtable", "IDs"}); err != nil {
		return err
	}
	if k, ok := KernelOf[EmbeddingKernel](dtable.Backend()); ok {
		return k.EmbeddingBackward(dtable, in)
	}
	return OnHost(1, []*Tensor{dtable, in.IDs, in.DY}, func(h []*Tensor) error {
		nnref.EmbeddingBackward(dtable.Dim(1), hostI32(h[1]), hostF32(h[2]), hostF32(h[0]), in.Accumulate)
		return nil
	})
}
