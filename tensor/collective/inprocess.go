package collective

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sync/errgroup"
)

// Run runs fn on n ranks, each in its own goroutine with its own Comm of an in-process group,
// and waits for all of them. The first rank to return an error cancels the context the others
// got and aborts the group (the collectives they are blocked in return ErrAborted); Run returns
// that first error, prefixed with its rank. Cancelling ctx aborts the group too. n must lie in
// [1, MaxRanks].
func Run(ctx context.Context, n int, fn func(ctx context.Context, c Comm) error) error {
	if err := checkRanks("collective.Run", n); err != nil {
		return err
	}
	if ctx == nil || fn == nil {
		return errors.New("collective.Run: nil context or nil fn")
	}
	eg, gctx := errgroup.WithContext(ctx)
	g := newGroup(n)
	stop := context.AfterFunc(gctx, func() { g.abort(context.Cause(gctx)) })
	defer stop()
	for r := range n {
		eg.Go(func() error {
			if err := fn(gctx, &local{g: g, rank: r}); err != nil {
				return fmt.Errorf("rank %d: %w", r, err)
			}
			return nil
		})
	}
	return eg.Wait()
}

// NewGroup returns the n Comms of one in-process group, for callers that start the ranks'
// goroutines themselves (Run does it for you). The group is aborted when any rank's
// collective sees its context cancelled. n must lie in [1, MaxRanks].
func NewGroup(n int) ([]Comm, error) {
	if err := checkRanks("collective.NewGroup", n); err != nil {
		return nil, err
	}
	g := newGroup(n)
	cs := make([]Comm, len(g.slots))
	for r := range cs {
		cs[r] = &local{g: g, rank: r}
	}
	return cs, nil
}

// MaxRanks is the largest in-process group: every rank is a goroutine with its own slot.
const MaxRanks = 1 << 16

func checkRanks(op string, n int) error {
	if n < 1 || n > MaxRanks {
		return fmt.Errorf("%s: %d ranks, want 1 to %d", op, n, MaxRanks)
	}
	return nil
}

// group is the shared state of the in-process ranks: a cyclic barrier and one slot per rank
// through which the ranks see each other's buffers between two barriers.
type group struct {
	mu      sync.Mutex
	cond    *sync.Cond
	arrived int
	gen     uint64
	err     error
	slots   []any
	keys    []string
}

func newGroup(n int) *group {
	g := &group{slots: make([]any, n), keys: make([]string, n)}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *group) abort(cause error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil {
		if cause == nil {
			cause = context.Canceled
		}
		g.err = fmt.Errorf("%w: %w", ErrAborted, cause)
		g.cond.Broadcast()
	}
}

// waitLocked is the barrier; g.mu is held.
func (g *group) waitLocked() error {
	if g.err != nil {
		return g.err
	}
	gen := g.gen
	g.arrived++
	if g.arrived == len(g.slots) {
		g.arrived = 0
		g.gen++
		g.cond.Broadcast()
		return nil
	}
	for gen == g.gen && g.err == nil {
		g.cond.Wait()
	}
	if gen == g.gen {
		return g.err
	}
	return nil
}

// local is one rank of an in-process group.
type local struct {
	g    *group
	rank int
}

func (c *local) Rank() int { return c.rank }
func (c *local) Size() int { return len(c.g.slots) }

// exchange publishes v under key, waits for every rank, runs read (which may look at every
// rank's slot but write only this rank's private memory), waits again, and then runs write.
func (c *local) exchange(ctx context.Context, key string, v any, read func(slots []any) error, write func()) error {
	g := c.g
	if err := ctx.Err(); err != nil {
		g.abort(err)
	}
	stop := context.AfterFunc(ctx, func() { g.abort(context.Cause(ctx)) })
	defer stop()
	g.mu.Lock()
	g.slots[c.rank], g.keys[c.rank] = v, key
	err := g.waitLocked()
	var mismatch error
	if err == nil {
		for r, k := range g.keys {
			if k != key {
				mismatch = fmt.Errorf("%w: rank %d called %s, rank %d called %s", ErrMismatch, c.rank, key, r, k)
				break
			}
		}
	}
	g.mu.Unlock()
	if err != nil {
		return err
	}
	if mismatch != nil {
		// Every rank sees the mismatch; all wait once more so no rank reuses the slots early.
		g.mu.Lock()
		_ = g.waitLocked()
		g.mu.Unlock()
		return mismatch
	}
	rerr := read(g.slots)
	g.mu.Lock()
	err = g.waitLocked()
	g.mu.Unlock()
	if err != nil {
		return err
	}
	if rerr != nil {
		return rerr
	}
	if write != nil {
		write()
	}
	return nil
}

func allReduce[F float32 | float64](ctx context.Context, c *local, kind string, buf []F, op Op) error {
	if err := checkCall(ctx, c); err != nil {
		return err
	}
	if err := checkOp(op); err != nil {
		return err
	}
	if c.Size() == 1 {
		return ctx.Err()
	}
	tmp := make([]F, len(buf))
	return c.exchange(ctx, fmt.Sprintf("allreduce-%s-%v[%d]", kind, op, len(buf)), buf, func(slots []any) error {
		parts := make([][]F, len(slots))
		for r, s := range slots {
			parts[r] = s.([]F)
		}
		reduceInto(tmp, parts, op)
		return nil
	}, func() { copy(buf, tmp) })
}

func (c *local) AllReduceFloat32(ctx context.Context, buf []float32, op Op) error {
	return allReduce(ctx, c, "f32", buf, op)
}

func (c *local) AllReduceFloat64(ctx context.Context, buf []float64, op Op) error {
	return allReduce(ctx, c, "f64", buf, op)
}

func (c *local) Broadcast(ctx context.Context, buf []byte, root int) error {
	if err := checkCall(ctx, c); err != nil {
		return err
	}
	if root < 0 || root >= c.Size() {
		return fmt.Errorf("collective: broadcast root %d outside [0, %d)", root, c.Size())
	}
	if c.Size() == 1 {
		return ctx.Err()
	}
	return c.exchange(ctx, fmt.Sprintf("bcast-root%d[%d]", root, len(buf)), buf, func(slots []any) error {
		if c.rank != root {
			copy(buf, slots[root].([]byte))
		}
		return nil
	}, nil)
}

func (c *local) AllGather(ctx context.Context, send, recv []byte) error {
	if err := checkCall(ctx, c); err != nil {
		return err
	}
	n := len(send)
	if len(recv) != n*c.Size() {
		return fmt.Errorf("collective: all-gather of %d bytes from %d ranks into %d bytes, want %d", n, c.Size(), len(recv), n*c.Size())
	}
	if c.Size() == 1 {
		copy(recv, send)
		return ctx.Err()
	}
	return c.exchange(ctx, fmt.Sprintf("allgather[%d]", n), send, func(slots []any) error {
		for r, s := range slots {
			copy(recv[r*n:(r+1)*n], s.([]byte))
		}
		return nil
	}, nil)
}

func (c *local) Barrier(ctx context.Context) error {
	if err := checkCall(ctx, c); err != nil {
		return err
	}
	if c.Size() == 1 {
		return ctx.Err()
	}
	return c.exchange(ctx, "barrier", nil, func([]any) error { return nil }, nil)
}

// IsAborted reports whether err says a collective was aborted because of another rank or a
// cancelled context (rather than this rank's own failure).
func IsAborted(err error) bool { return errors.Is(err, ErrAborted) }

// allToAll hands each rank the piece every other rank addressed to it.
func (c *local) allToAll(ctx context.Context, send [][]byte) ([][]byte, error) {
	recv := make([][]byte, c.Size())
	return recv, c.exchange(ctx, "alltoall", send, func(slots []any) error {
		for q, s := range slots {
			pieces := s.([][]byte)
			if len(pieces) != len(slots) {
				return fmt.Errorf("%w: all-to-all: rank %d sent %d pieces for %d ranks", ErrMismatch, q, len(pieces), len(slots))
			}
			recv[q] = append([]byte(nil), pieces[c.rank]...)
		}
		return nil
	}, nil)
}

// reduceScatterFloat32 reads this rank's shard of every rank's buffer and sums it in rank order.
func (c *local) reduceScatterFloat32(ctx context.Context, buf, shard []float32) error {
	lo, hi := Shard(len(buf), c.rank, c.Size())
	return c.exchange(ctx, fmt.Sprintf("reducescatter-f32[%d]", len(buf)), buf, func(slots []any) error {
		parts := make([][]float32, len(slots))
		for q, s := range slots {
			parts[q] = s.([]float32)[lo:hi]
		}
		reduceInto(shard, parts, Sum)
		return nil
	}, nil)
}
