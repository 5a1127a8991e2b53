package collective

import (
	"context"
	"errors"
	"fmt"

	"github.com/mtrl-go/mtrl/tensor"
)

// Tensors is one rank's collectives on tensors, the interface shared by the host
// implementation (HostTensors, over any Comm) and NCCL (cuda.NCCL, on device buffers with no
// host staging), so that code reducing gradients names neither. Every rank must call the same
// collectives in the same order with tensors of the same length and dtype. HostTensors over
// the in-process group and NCCL on the CUDA emulator's stand-in both reduce in rank order with
// the same float32 arithmetic, so they agree bit for bit; MPI and real NCCL reduce in their own
// order (still identically on every rank).
type Tensors interface {
	// Rank is this rank's index in [0, Size).
	Rank() int
	// Size is the number of ranks.
	Size() int
	// AllReduce replaces t (float32), on every rank, by the element-wise reduction of every
	// rank's t.
	AllReduce(ctx context.Context, t *tensor.Tensor, op Op) error
	// ReduceScatter sums src (float32, Size·dst.Len() elements on every rank) over the ranks and
	// writes chunk Rank of the sum, elements [Rank·n, (Rank+1)·n) with n = dst.Len(), into dst:
	// NCCL's equal chunks (Shard's split when n divides evenly).
	ReduceScatter(ctx context.Context, dst, src *tensor.Tensor) error
	// AllGather writes every rank's src, in rank order, into dst (Size·src.Len() elements of
	// src's dtype).
	AllGather(ctx context.Context, dst, src *tensor.Tensor) error
	// Broadcast copies root's t (any dtype) into every other rank's t.
	Broadcast(ctx context.Context, t *tensor.Tensor, root int) error
}

// HostTensors is Tensors over a Comm: host tensors are reduced in place in their memory; a
// tensor on another backend is downloaded, reduced on the host and uploaded (the host-staged
// path NCCL avoids).
type HostTensors struct{ c Comm }

var _ Tensors = (*HostTensors)(nil)

// NewHostTensors returns the tensor collectives of c.
func NewHostTensors(c Comm) (*HostTensors, error) {
	if c == nil {
		return nil, errors.New("collective: NewHostTensors of a nil Comm")
	}
	return &HostTensors{c}, nil
}

// Rank returns the Comm's rank (0 for a HostTensors not made by NewHostTensors).
func (h *HostTensors) Rank() int {
	if h.check("") != nil {
		return 0
	}
	return h.c.Rank()
}

// Size returns the Comm's size (0 for a HostTensors not made by NewHostTensors).
func (h *HostTensors) Size() int {
	if h.check("") != nil {
		return 0
	}
	return h.c.Size()
}

// check reports a HostTensors not made by NewHostTensors (nil, or the zero value).
func (h *HostTensors) check(name string) error {
	if h == nil || h.c == nil {
		return tensor.Errorf(tensor.ErrParam, name, "receiver", "a HostTensors not made by NewHostTensors")
	}
	return nil
}

// AllReduce implements Tensors with Comm.AllReduceFloat32.
func (h *HostTensors) AllReduce(ctx context.Context, t *tensor.Tensor, op Op) error {
	const name = "collective.HostTensors.AllReduce"
	if err := h.check(name); err != nil {
		return err
	}
	if err := tensor.CheckDType(name, "t", t, tensor.Float32); err != nil {
		return err
	}
	return onHost(t, true, func(t *tensor.Tensor) error {
		v, err := t.Float32s()
		if err != nil {
			return err
		}
		return h.c.AllReduceFloat32(ctx, v, op)
	})
}

// ReduceScatter implements Tensors with ReduceScatterFloat32 (in rank order in process and
// through the fallback; MPI_Reduce_scatter's order under MPI).
func (h *HostTensors) ReduceScatter(ctx context.Context, dst, src *tensor.Tensor) error {
	const name = "collective.HostTensors.ReduceScatter"
	if err := h.check(name); err != nil {
		return err
	}
	if err := tensor.CheckDType(name, "dst", dst, tensor.Float32); err != nil {
		return err
	}
	if err := tensor.CheckDType(name, "src", src, tensor.Float32); err != nil {
		return err
	}
	if src.Len() != h.Size()*dst.Len() {
		return tensor.Errorf(tensor.ErrShape, name, "src", "has %d elements, want %d ranks × dst's %d", src.Len(), h.Size(), dst.Len())
	}
	return onHost(src, false, func(src *tensor.Tensor) error {
		return onHost(dst, true, func(dst *tensor.Tensor) error {
			s, err := src.Float32s()
			if err != nil {
				return err
			}
			d, err := dst.Float32s()
			if err != nil {
				return err
			}
			_, err = ReduceScatterFloat32(ctx, h.c, s, d)
			return err
		})
	})
}

// AllGather implements Tensors with Comm.AllGather.
func (h *HostTensors) AllGather(ctx context.Context, dst, src *tensor.Tensor) error {
	const name = "collective.HostTensors.AllGather"
	if err := h.check(name); err != nil {
		return err
	}
	if err := tensor.CheckTensor(name, "src", src); err != nil {
		return err
	}
	if err := tensor.CheckTensor(name, "dst", dst); err != nil {
		return err
	}
	if dst.DType() != src.DType() || dst.Len() != h.Size()*src.Len() {
		return tensor.Errorf(tensor.ErrShape, name, "dst", "has %d %v, want %d %v", dst.Len(), dst.DType(), h.Size()*src.Len(), src.DType())
	}
	return onHost(src, false, func(src *tensor.Tensor) error {
		return onHost(dst, true, func(dst *tensor.Tensor) error {
			s, err := hostBytes(src)
			if err != nil {
				return err
			}
			d, err := hostBytes(dst)
			if err != nil {
				return err
			}
			return h.c.AllGather(ctx, s, d)
		})
	})
}

// Broadcast implements Tensors with Comm.Broadcast.
func (h *HostTensors) Broadcast(ctx context.Context, t *tensor.Tensor, root int) error {
	const name = "collective.HostTensors.Broadcast"
	if err := h.check(name); err != nil {
		return err
	}
	if err := tensor.CheckTensor(name, "t", t); err != nil {
		return err
	}
	if root < 0 || root >= h.Size() {
		return tensor.Errorf(tensor.ErrParam, name, "root", "is %d, want [0, %d)", root, h.Size())
	}
	return onHost(t, true, func(t *tensor.Tensor) error {
		b, err := hostBytes(t)
		if err != nil {
			return err
		}
		return h.c.Broadcast(ctx, b, root)
	})
}

// onHost runs fn on t, or on a host copy of t that (when write) is copied back afterwards.
func onHost(t *tensor.Tensor, write bool, fn func(*tensor.Tensor) error) error {
	if t.IsHost() {
		return fn(t)
	}
	h, err := tensor.To(tensor.CPU(), t)
	if err != nil {
		return err
	}
	if err := fn(h); err != nil {
		return err
	}
	if write {
		return tensor.CopyInto(t, h)
	}
	return nil
}

// hostBytes are a host tensor's bytes (its view of its storage).
func hostBytes(t *tensor.Tensor) ([]byte, error) {
	st, off := t.Storage()
	sz := t.DType().Size()
	hs, ok := st.(tensor.HostStorage)
	if !ok || len(hs.Bytes()) < (off+t.Len())*sz {
		return nil, fmt.Errorf("collective: a tensor on %s is not host memory", t.Backend().Name())
	}
	return hs.Bytes()[off*sz : (off+t.Len())*sz], nil
}
