package loop

import (
	"context"
	"fmt"
	"sync"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
)

// FinalGradients is implemented by a policy whose backward finishes some parameters'
// gradients before it returns (a model's layers, last to first). While a hook is set,
// Backward calls it, on its own goroutine and before it returns, with gradients (Param.Grad
// tensors) that the rest of that Backward leaves unchanged, so that their reduction over the
// ranks can run while the backward goes on. The loop sets a hook only around the backward of
// a mini-batch's last micro-batch, whose gradients are then final for the step, and removes
// it (nil) after.
type FinalGradients interface {
	// ReportFinal sets the hook (nil: none) and says whether Backward will call it; a policy
	// that wraps a model without the report returns false, and the loop reduces after the
	// backward.
	ReportFinal(hook func(grads ...*tensor.Tensor)) bool
}

// OverlapGradients is a Gradients that can reduce buckets of the gradient while the backward
// of the mini-batch's last micro-batch still runs (BucketedGradients).
type OverlapGradients interface {
	Gradients
	// Overlap starts the reduction of the mini-batch before the backward of its last
	// micro-batch: final, the policy's hook, queues each bucket once every gradient in it was
	// reported, and a goroutine reduces the queued buckets in that order through comm. The
	// loop then calls Collect and Reduce (same comm and scale), which reduces the buckets
	// not reported and waits. A nil final means this Gradients cannot overlap (Reduce does
	// all). StopOverlap abandons a started overlap (the policy cannot report, or its backward
	// failed): it waits for the goroutine; what was collected before stays collected.
	Overlap(ctx context.Context, comm collective.Comm, scale float32) (final func(grads ...*tensor.Tensor), err error)
	StopOverlap()
}

// overlap is one reduction running next to a backward.
type overlap struct {
	r     *round
	queue chan int // bucket indices, in the order they became final
	done  chan struct{}

	mu       sync.Mutex
	index    map[*tensor.Tensor]int // a gradient tensor's parameter
	offs     []int                  // per parameter: its flattened offset
	reported []bool                 // per parameter
	left     []int                  // per bucket: values not yet final
	queued   []bool                 // per bucket
	started  int                    // buckets queued by the hook

	// written by the goroutine, read after done
	received int64
	err      error
}

// Overlap implements OverlapGradients. Each bucket is reduced exactly as Reduce reduces it
// (the same pieces, the same rank order, the same scaling), so the result is Reduce's bit for
// bit; only the order of the buckets changes, which every rank shares because the hook's
// calls follow the model's backward.
func (g *BucketedGradients) Overlap(ctx context.Context, comm collective.Comm, scale float32) (func(...*tensor.Tensor), error) {
	if g.ov != nil {
		return nil, fmt.Errorf("loop: Overlap while a reduction is running")
	}
	if ctx == nil {
		ctx = context.Background()
	}
	r, err := g.newRound(comm, scale, true)
	if err != nil {
		return nil, err
	}
	l := g.layout
	bs := l.buckets()
	o := &overlap{r: r, queue: make(chan int, len(bs)), done: make(chan struct{}),
		index: map[*tensor.Tensor]int{}, reported: make([]bool, len(l.params)), left: make([]int, len(bs)),
		queued: make([]bool, len(bs))}
	off := 0
	for i, p := range l.params {
		o.index[p.Grad] = i
		o.offs = append(o.offs, off)
		off += l.sizes[i]
	}
	for i, b := range bs {
		o.left[i] = b[1] - b[0]
	}
	g.ov = o
	queue := o.queue // finish clears the field
	go func() {
		defer close(o.done)
		for i := range queue {
			if o.err != nil {
				continue // a failed rank: the others are released by the group's abort
			}
			var recv int64
			recv, o.err = r.bucket(ctx, bs[i])
			o.received += recv
		}
	}()
	return o.final, nil
}

// final is the policy's hook: it marks the parameters of grads final and queues the buckets
// that became wholly final. Tensors that are not parameters here are ignored.
func (o *overlap) final(grads ...*tensor.Tensor) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.queue == nil {
		return // Reduce has begun: it reduces whatever is left
	}
	l := o.r.g.layout
	for _, t := range grads {
		i, ok := o.index[t]
		if !ok || o.reported[i] {
			continue
		}
		o.reported[i] = true
		lo, hi := o.offs[i], o.offs[i]+l.sizes[i]
		for b := lo / l.bucket; b*l.bucket < hi; b++ {
			o.left[b] -= min(hi, (b+1)*l.bucket) - max(lo, b*l.bucket)
			if o.left[b] == 0 && !o.queued[b] {
				o.queued[b] = true
				o.started++
				o.queue <- b
			}
		}
	}
}

// finish queues the buckets not reported, in order, and waits for the goroutine.
func (o *overlap) finish(abandon bool) (int64, error) {
	o.mu.Lock()
	if !abandon {
		for b, q := range o.queued {
			if !q {
				o.queued[b] = true
				o.queue <- b
			}
		}
	}
	close(o.queue)
	o.queue = nil
	o.mu.Unlock()
	<-o.done
	return o.received, o.err
}

// StopOverlap implements OverlapGradients.
func (g *BucketedGradients) StopOverlap() {
	if g.ov != nil {
		_, _ = g.ov.finish(true)
		g.ov = nil
	}
}

// OverlappedBuckets is the number of buckets the last reduction started before the backward
// of its last micro-batch returned (reported final by the policy), out of Buckets. It depends
// on the policy's reports only, not on timing.
func (g *BucketedGradients) OverlappedBuckets() int { return g.overlapped }

// Buckets is the number of buckets of each reduction.
func (g *BucketedGradients) Buckets() int { return len(g.layout.buckets()) }
