package loop_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// reporting is the tiny model with a backward that finishes its parameters last to first,
// reporting each one final (all but the first, as a model reports its layers but not its
// embeddings). Every gradient value gets the same additions in the same order as the tiny
// model's backward.
type reporting struct {
	*tiny
	ps   []loop.Param
	hook func(...*tensor.Tensor)
}

func (m *reporting) ReportFinal(hook func(...*tensor.Tensor)) bool {
	m.hook = hook
	return true
}

func (m *reporting) Logits(b *loop.Batch[prompt], lo, hi int, in loop.Input, train bool) (loop.Logits, error) {
	out, err := m.tiny.Logits(b, lo, hi, in, train)
	if err != nil || !train {
		return out, err
	}
	out.Backward = func(d *tensor.Tensor) error {
		dv, _ := d.Float32s()
		g, _ := m.g.Float32s()
		end := len(g)
		for k := len(m.ps) - 1; k >= 0; k-- {
			start := end - m.ps[k].Grad.Len()
			for r := range hi - lo {
				base := class(b.Prompts[lo+r].pixel) * respLen * vocab
				for j, x := range dv[r*b.T*vocab : (r+1)*b.T*vocab] {
					if i := base + j; i >= start && i < end {
						g[i] += x
					}
				}
			}
			if m.hook != nil && k > 0 {
				m.hook(m.ps[k].Grad)
			}
			end = start
		}
		return nil
	}
	return out, nil
}

func reportingPolicy(m *tiny, ps []loop.Param) loop.Policy[prompt] {
	return loop.FromLogits[prompt](&reporting{tiny: m, ps: ps})
}

// TestOverlapBitIdentical: the bucketed reductions overlapped with the backward (the policy
// reports its parameters final) give the metrics and weights of the same reductions after the
// backward, bit for bit, on 2 and 4 ranks, with the buckets the policy finished reduced early
// (the last two of four here, the first two after the backward).
func TestOverlapBitIdentical(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		rc := loop.ReduceConfig{Ordered: ordered, BucketBytes: smallBuckets}
		for name, md := range map[string]mode{"bucketed": bucketed(rc), "zero2": sharded(loop.ShardGradients, rc)} {
			for _, size := range []int{2, 4} {
				t.Run(fmt.Sprintf("%s/ordered=%v/%d", name, ordered, size), func(t *testing.T) {
					want := runRanks(t, size, 3, md)
					early := make([]int, size)
					got := runPolicy(t, size, 3, md, reportingPolicy, func(rank int, g loop.Gradients) {
						bg, ok := g.(*loop.BucketedGradients)
						require.True(t, ok)
						assert.Equal(t, 4, bg.Buckets())
						early[rank] = bg.OverlappedBuckets()
					})
					for r := range size {
						assert.Equal(t, 2, early[r], "rank %d: buckets reduced during the backward", r)
						require.Equal(t, want.weights[r], got.weights[r], "rank %d weights", r)
						assert.Equal(t, want.metrics[r], got.metrics[r], "rank %d metrics", r)
					}
				})
			}
		}
	}
}

// failing fails its backward on rank 1 before reporting anything and on rank 2 after
// reporting its last parameter final; the other ranks report it and return.
type failing struct {
	*reporting
	rank int
}

func (m *failing) Logits(b *loop.Batch[prompt], lo, hi int, in loop.Input, train bool) (loop.Logits, error) {
	out, err := m.reporting.Logits(b, lo, hi, in, train)
	if err != nil || !train {
		return out, err
	}
	out.Backward = func(*tensor.Tensor) error {
		if m.rank == 1 { // before the others' first bucket: they wait in its reduction
			return errors.New("injected failure")
		}
		if m.hook != nil {
			m.hook(m.ps[len(m.ps)-1].Grad)
		}
		if m.rank == 2 { // after starting it
			return errors.New("injected failure")
		}
		return nil
	}
	return out, nil
}

// TestOverlapRankFailure: a rank whose backward fails after a bucket's reduction started stops
// every rank (the others are released from their reductions) with its error.
func TestOverlapRankFailure(t *testing.T) {
	for _, size := range []int{2, 4} {
		err := collective.Run(context.Background(), size, func(ctx context.Context, c collective.Comm) error {
			s := newSetup()
			p := s.parts(c)
			ps := splitParams(s.model)
			p.Policy = loop.FromLogits[prompt](&failing{&reporting{tiny: s.model, ps: ps}, c.Rank()})
			var err error
			if p.Gradients, p.Optimizer, err = bucketed(loop.ReduceConfig{BucketBytes: smallBuckets})(ps, c.Rank(), size); err != nil {
				return err
			}
			l, err := loop.New(s.cfg, p)
			if err != nil {
				return err
			}
			_, err = l.Step(ctx)
			return err
		})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "injected failure", "%d ranks", size)
	}
}
