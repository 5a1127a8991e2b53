package main

import (
	"context"

	"github.com/mtrl-go/mtrl/tensor/collective"
)

// Data parallelism (training.n_gpus_per_node ranks in this process, times training.nnodes MPI
// processes). Every rank holds a full replica and the whole step's batch of prompts; the work
// on rows is split into contiguous shards (rank r: rows [r·B/W, (r+1)·B/W)):
//
//   - rollouts: each rank samples its rows, each row from its own random source keyed by
//     (seed, step, round, row), and the responses are all-gathered;
//   - old / perturbed / reference log-probs and the MDI attention: sharded, all-gathered;
//   - rewards, advantages (whitening included), shaping statistics, token counts and the
//     rollout metrics: on the gathered batch, identically on every rank, so they are global by
//     construction and equal to one device's;
//   - the update: each mini-batch's rows are split into whole prompt groups per rank, the
//     gradients all-reduced (sum in rank order, then / W, as the token scaling expects) before
//     clipping; every replica takes the same AdamW step and keeps bit-identical weights.

// world is the number of data-parallel ranks (1 without a Comm).
func (t *Trainer) world() int {
	if t.comm == nil {
		return 1
	}
	return t.comm.Size()
}

func (t *Trainer) rank() int {
	if t.comm == nil {
		return 0
	}
	return t.comm.Rank()
}

// lead is true on the rank that writes files (rank 0).
func (t *Trainer) lead() bool { return t.rank() == 0 }

// shard returns this rank's contiguous share [lo, hi) of n rows.
func (t *Trainer) shard(n int) (lo, hi int) { return collective.Shard(n, t.rank(), t.world()) }

func (t *Trainer) ctxOrBackground() context.Context {
	if t.ctx == nil {
		return context.Background()
	}
	return t.ctx
}

// testRankFail, when set (tests), runs on every rank in each RL step after the mini-batch is
// prepared; an error it returns is that rank's failure.
var testRankFail func(rank, step int) error

// agree returns whether any rank says stop (an interrupt seen by one process reaches the
// others at the same step).
func (t *Trainer) agree(stop bool) (bool, error) {
	if t.world() == 1 {
		return stop, nil
	}
	v := []float64{0}
	if stop {
		v[0] = 1
	}
	if err := t.comm.AllReduceFloat64(t.ctxOrBackground(), v, collective.Max); err != nil {
		return false, err
	}
	return v[0] != 0, nil
}

// attach makes t one rank of comm: the token scaling counts the ranks, and collectives use
// ctx (cancelled when another rank fails).
func (t *Trainer) attach(comm collective.Comm, ctx context.Context) {
	t.comm, t.ctx = comm, ctx
	t.update.WorldSize = comm.Size()
	t.rl = nil // rebuilt with the group at the next step
}
