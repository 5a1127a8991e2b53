package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/mtrl-go/mtrl/examples/hflm"
	"github.com/mtrl-go/mtrl/tensor/collective"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// Data parallelism of a model_path run (training.n_gpus_per_node ranks in this process, times
// training.nnodes MPI processes), as the built-in model's (parallel.go): every rank opens its
// own replica of the checkpoint and holds the whole step's prompts; the loop (tprl/loop with a
// Comm) samples and scores each rank's contiguous share of the rows and all-gathers them,
// computes rewards and advantages on the gathered batch on every rank, and splits each
// mini-batch into whole prompt groups per rank. The gradients are summed by
// worker.actor.grad_reduce (ordered: loop.HostGradients, one device's bits at any N; bucketed:
// loop.BucketedGradients) and the optimizer is fsdp.sharding_strategy's (NO_SHARD: the
// model's AdamW, whole on every rank; SHARD_GRAD_OP and the FSDP names: loop.ShardedAdamW,
// ZeRO-2). Rank 0 alone validates, logs and writes; a checkpoint's optimizer.safetensors
// holds the whole moments in the unsharded layout, gathered from the ranks, so it resumes at
// any number of ranks, sharded or not.

// runHFRanks starts the ranks of runHF (one: runHFRank directly).
func runHFRanks[P any](ctx context.Context, cfg Config, open func(Config) (*hfSession[P], error), stdout, stderr io.Writer) (*Summary, error) {
	c := cfg.Training
	inter, err := processComm(c.Nnodes)
	if err != nil {
		return nil, err
	}
	n := max(1, c.NGPUsPerNode)
	if n == 1 && inter == nil {
		return runHFRank(ctx, cfg, open, nil, nil, stdout, stderr)
	}
	var sum *Summary
	interrupted := false
	err = collective.Run(context.Background(), n, func(rctx context.Context, comm collective.Comm) error {
		if inter != nil {
			comm = collective.Hierarchical(comm, inter)
		}
		out, errw := stdout, stderr
		if comm.Rank() != 0 {
			out, errw = io.Discard, io.Discard
		}
		s, err := runHFRank(ctx, cfg, open, comm, rctx, out, errw)
		if comm.Rank() == 0 {
			sum, interrupted = s, errors.Is(err, ErrInterrupted)
		}
		if errors.Is(err, ErrInterrupted) {
			return nil // every rank stopped at the same step (agree)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if interrupted {
		return sum, ErrInterrupted
	}
	return sum, nil
}

// sameChoice fails unless every rank of comm says state: with several processes the run
// directory must be on a filesystem they share. It is also a barrier.
func sameChoice(ctx context.Context, comm collective.Comm, dir, state string) error {
	seen, err := collective.AllGatherBytes(ctx, comm, []byte(state))
	if err != nil {
		return err
	}
	for r, s := range seen {
		if string(s) != string(seen[0]) {
			return fmt.Errorf("training.run_dir %s: rank %d sees checkpoint state %q, rank 0 %q: put the run directory on a filesystem every process shares", dir, r, s, seen[0])
		}
	}
	return nil
}

// agree returns whether any rank says stop (an interrupt seen by one process reaches the
// others at the same step).
func (t *hfTrainer[P]) agree(stop bool) (bool, error) {
	if t.comm == nil || t.comm.Size() == 1 {
		return stop, nil
	}
	v := []float64{0}
	if stop {
		v[0] = 1
	}
	if err := t.comm.AllReduceFloat64(t.rctx, v, collective.Max); err != nil {
		return false, err
	}
	return v[0] != 0, nil
}

// follow is a rank other than 0 after the start: the RL steps, and the collective part of
// each checkpoint rank 0 writes (the moments' gather), at the same steps as runHFRank's loop.
func (t *hfTrainer[P]) follow(ctx context.Context, resumed bool) error {
	c := t.cfg.Training
	ps, err := t.s.model.Params()
	if err != nil {
		return err
	}
	lastSaved := -1
	if resumed {
		lastSaved = t.loop.State().Step
	}
	interrupted := false
	for t.loop.State().Step < t.steps {
		stop, err := t.agree(ctx.Err() != nil)
		if err != nil {
			return err
		}
		if stop {
			interrupted = true
			break
		}
		res, err := t.loop.Step(t.rctx)
		if err != nil {
			return fmt.Errorf("step %d: %w", t.loop.State().Step+1, err)
		}
		res.Release()
		step := t.loop.State().Step
		if (c.SaveFreq > 0 && step%c.SaveFreq == 0) || step == t.steps {
			if _, _, _, err := t.wholeMoments(ps); err != nil {
				return fmt.Errorf("checkpoint at step %d: %w", step, err)
			}
			lastSaved = step
		}
	}
	if !interrupted {
		return nil
	}
	if lastSaved != t.loop.State().Step {
		if _, _, _, err := t.wholeMoments(ps); err != nil {
			return err
		}
	}
	return ErrInterrupted
}

// actorTraining returns the optimizer and gradient sum of worker.actor.grad_reduce and
// fsdp.sharding_strategy for this rank.
func (t *hfTrainer[P]) actorTraining() (loop.Optimizer, loop.Gradients, error) {
	a := t.cfg.Worker.Actor
	stage, err := a.FSDP.Sharding()
	if err != nil {
		return nil, nil, err
	}
	rank, world := 0, 1
	if t.comm != nil {
		rank, world = t.comm.Rank(), t.comm.Size()
	}
	rc := loop.ReduceConfig{Ordered: a.GradReduce == "ordered", BucketBytes: int(a.GradBucketMB * (1 << 20))}
	o := a.Optim
	if stage != 0 {
		// The model's own AdamW is never built: its whole moments are what ZeRO saves.
		ps, err := t.s.model.Params()
		if err != nil {
			return nil, nil, err
		}
		zero, g, err := loop.NewShardedAdamW(ps, stage, rc, rank, world, o.Betas[0], o.Betas[1], o.Eps, o.WeightDecay)
		if err != nil {
			return nil, nil, err
		}
		t.zero = zero
		return repackedZeRO{zero, t.s.model.Repack}, g, nil
	}
	opt, adam, g, err := t.s.training(o.WeightDecay)
	if err != nil {
		return nil, nil, err
	}
	adam.Beta1, adam.Beta2, adam.Eps = o.Betas[0], o.Betas[1], o.Eps
	t.adam = adam
	if dev, ok := opt.(*hflm.DeviceAdamW); ok {
		// The model on a device (one rank): its gradients are summed there, in place.
		t.devOpt = dev
		return opt, g, nil
	}
	if !rc.Ordered {
		ps, err := t.s.model.Params()
		if err != nil {
			return nil, nil, err
		}
		if g, err = loop.NewBucketedGradients(ps, rc, rank, world); err != nil {
			return nil, nil, err
		}
	}
	return opt, g, nil
}

// repackedZeRO is ShardedAdamW over a Hugging Face model: after each step (the all-gather of
// the updated shards included) the model rebuilds what it derives from its weights (the
// bf16 copies of mixed precision, the packed matrices).
type repackedZeRO struct {
	*loop.ShardedAdamW
	repack func() error
}

// Step implements loop.Optimizer (one rank).
func (o repackedZeRO) Step(lr, maxNorm float64) (float64, error) {
	norm, err := o.ShardedAdamW.Step(lr, maxNorm)
	if err != nil {
		return norm, err
	}
	return norm, o.repack()
}

// StepGroup implements loop.GroupOptimizer.
func (o repackedZeRO) StepGroup(ctx context.Context, comm collective.Comm, lr, maxNorm float64) (float64, int64, error) {
	norm, recv, err := o.ShardedAdamW.StepGroup(ctx, comm, lr, maxNorm)
	if err != nil {
		return norm, recv, err
	}
	return norm, recv, o.repack()
}

// wholeMoments returns AdamW's moments of every parameter (in Params order) and its step
// count. With ZeRO it all-gathers the ranks' shards, so every rank must call it together.
func (t *hfTrainer[P]) wholeMoments(ps []loop.Param) (m, v [][]float32, steps int, err error) {
	if t.zero == nil {
		if t.devOpt != nil {
			if err := t.devOpt.SaveMoments(); err != nil {
				return nil, nil, 0, err
			}
		}
		return t.adam.M, t.adam.V, t.adam.T, nil
	}
	shards, err := collective.AllGatherValues(t.rctx, t.comm, t.zero.Moments())
	if err != nil {
		return nil, nil, 0, err
	}
	slices.SortFunc(shards, func(a, b loop.MomentShard) int { return a.Lo - b.Lo })
	var flat loop.MomentShard
	for _, s := range shards {
		if s.Lo != len(flat.M) || len(s.M) != s.Hi-s.Lo || len(s.V) != s.Hi-s.Lo {
			return nil, nil, 0, fmt.Errorf("optimizer: moment shard [%d, %d) does not continue the gathered %d values", s.Lo, s.Hi, len(flat.M))
		}
		flat.M, flat.V = append(flat.M, s.M...), append(flat.V, s.V...)
	}
	at := 0
	for _, p := range ps {
		n := p.Value.Len()
		if at+n > len(flat.M) {
			return nil, nil, 0, fmt.Errorf("optimizer: gathered %d moment values for more parameters", len(flat.M))
		}
		m, v = append(m, flat.M[at:at+n]), append(v, flat.V[at:at+n])
		at += n
	}
	if at != len(flat.M) {
		return nil, nil, 0, fmt.Errorf("optimizer: gathered %d moment values, the parameters have %d", len(flat.M), at)
	}
	return m, v, t.zero.T, nil
}

// setMoments sets AdamW's moments from whole per-parameter ones (a checkpoint's, written at
// any number of ranks): with ZeRO this rank keeps its shard of them.
func (t *hfTrainer[P]) setMoments(m, v [][]float32, steps int) error {
	if t.zero == nil {
		for i := range m {
			copy(t.adam.M[i], m[i])
			copy(t.adam.V[i], v[i])
		}
		t.adam.T = steps
		if t.devOpt != nil {
			return t.devOpt.LoadMoments()
		}
		return nil
	}
	var flat loop.MomentShard
	for i := range m {
		flat.M, flat.V = append(flat.M, m[i]...), append(flat.V, v[i]...)
	}
	flat.Hi = len(flat.M)
	if err := t.zero.SetMoments([]loop.MomentShard{flat}); err != nil {
		return err
	}
	t.zero.T = steps
	return nil
}
