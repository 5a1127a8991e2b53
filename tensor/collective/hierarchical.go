package collective

import (
	"context"
	"errors"
	"fmt"
)

// Hierarchical joins the in-process group of this process (local, one of NewGroup's or Run's
// Comms) with a process-level Comm (inter, e.g. MPI; used only by local rank 0) into one group
// of inter.Size()·local.Size() ranks. Global rank = process·local.Size() + local rank, so each
// process holds a contiguous block of ranks. Reductions gather every rank's values and reduce
// them in global rank order, so every rank receives the same bits as Run would give. With a
// nil local or inter Comm the group is empty: Rank and Size are 0 and every collective
// returns an error.
func Hierarchical(local, inter Comm) Comm {
	return &hier{local: local, inter: inter}
}

type hier struct{ local, inter Comm }

func (h *hier) ok() bool { return h != nil && h.local != nil && h.inter != nil }

func (h *hier) Rank() int {
	if !h.ok() {
		return 0
	}
	return h.inter.Rank()*h.local.Size() + h.local.Rank()
}

func (h *hier) Size() int {
	if !h.ok() {
		return 0
	}
	return h.inter.Size() * h.local.Size()
}

// check validates a collective's arguments.
func (h *hier) check(ctx context.Context) error {
	if err := checkCall(ctx, h); err != nil {
		return err
	}
	if !h.ok() {
		return errors.New("collective: Hierarchical group with a nil local or inter Comm")
	}
	return nil
}

func (h *hier) AllGather(ctx context.Context, send, recv []byte) error {
	if err := h.check(ctx); err != nil {
		return err
	}
	n := len(send)
	if len(recv) != n*h.Size() {
		return fmt.Errorf("collective: all-gather of %d bytes from %d ranks into %d bytes, want %d", n, h.Size(), len(recv), n*h.Size())
	}
	mine := make([]byte, n*h.local.Size())
	if err := h.local.AllGather(ctx, send, mine); err != nil {
		return err
	}
	if h.local.Rank() == 0 {
		if err := h.inter.AllGather(ctx, mine, recv); err != nil {
			return err
		}
	}
	return h.local.Broadcast(ctx, recv, 0)
}

func (h *hier) Broadcast(ctx context.Context, buf []byte, root int) error {
	if err := h.check(ctx); err != nil {
		return err
	}
	if root < 0 || root >= h.Size() {
		return fmt.Errorf("collective: broadcast root %d outside [0, %d)", root, h.Size())
	}
	proc, lroot := root/h.local.Size(), root%h.local.Size()
	if h.inter.Rank() == proc {
		if err := h.local.Broadcast(ctx, buf, lroot); err != nil {
			return err
		}
	}
	if h.local.Rank() == 0 {
		if err := h.inter.Broadcast(ctx, buf, proc); err != nil {
			return err
		}
	}
	return h.local.Broadcast(ctx, buf, 0)
}

func (h *hier) Barrier(ctx context.Context) error {
	if err := h.check(ctx); err != nil {
		return err
	}
	if err := h.local.Barrier(ctx); err != nil {
		return err
	}
	if h.local.Rank() == 0 {
		if err := h.inter.Barrier(ctx); err != nil {
			return err
		}
	}
	return h.local.Barrier(ctx)
}

func (h *hier) AllReduceFloat32(ctx context.Context, buf []float32, op Op) error {
	if err := h.check(ctx); err != nil {
		return err
	}
	return gatherReduce(ctx, h, buf, op)
}

func (h *hier) AllReduceFloat64(ctx context.Context, buf []float64, op Op) error {
	if err := h.check(ctx); err != nil {
		return err
	}
	return gatherReduce(ctx, h, buf, op)
}

// gatherReduce is an all-reduce as an all-gather followed by the same rank-order reduction on
// every rank: bit-identical results at the cost of Size times the bytes of a ring all-reduce.
func gatherReduce[F float32 | float64](ctx context.Context, c Comm, buf []F, op Op) error {
	if err := checkOp(op); err != nil {
		return err
	}
	send := encode(buf)
	all := make([]byte, len(send)*c.Size())
	if err := c.AllGather(ctx, send, all); err != nil {
		return err
	}
	parts := make([][]F, c.Size())
	for r := range parts {
		parts[r] = make([]F, len(buf))
		decode(parts[r], all[r*len(send):(r+1)*len(send)])
	}
	reduceInto(buf, parts, op)
	return nil
}
