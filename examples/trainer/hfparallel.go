package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

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
// model's AdamW, whole on every rank; optim, SHARD_GRAD_OP and the other FSDP names:
// loop.ShardedAdamW, ZeRO-1 or ZeRO-2). Rank 0 alone validates, logs and writes, but with
// ZeRO each rank writes its own shard of the AdamW moments into the checkpoint (zeroshards.go),
// which resumes at any number of ranks, sharded or not.

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
		rcfg := cfg
		rcfg.deviceOrdinal = comm.Rank() % n // worker.actor.device=cuda: one device per rank of this process
		s, err := runHFRank(ctx, rcfg, open, comm, rctx, out, errw)
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
// each checkpoint rank 0 writes (with ZeRO, this rank's moment shard), at the same steps as
// runHFRank's loop.
func (t *hfTrainer[P]) follow(ctx context.Context, resumed bool) error {
	c := t.cfg.Training
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
			if err := t.saveShards(""); err != nil {
				return fmt.Errorf("checkpoint at step %d: %w", step, err)
			}
			lastSaved = step
		}
	}
	if !interrupted {
		return nil
	}
	if lastSaved != t.loop.State().Step {
		if err := t.saveShards(""); err != nil {
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
	if ps, err := t.s.model.Params(); err != nil {
		return nil, nil, err
	} else if len(ps) > 0 && !ps[0].Value.IsHost() {
		return t.deviceTraining(ps, stage, rc, rank, world) // hfdevice.go
	}
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
		t.zero = hostZero{zero}
		return repackedZeRO{zero, t.s.model.Repack}, g, nil
	}
	opt, adam, g, err := t.s.training(o.WeightDecay)
	if err != nil {
		return nil, nil, err
	}
	adam.Beta1, adam.Beta2, adam.Eps = o.Betas[0], o.Betas[1], o.Eps
	t.adam = adam
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

// optimizerSteps is AdamW's step count.
func (t *hfTrainer[P]) optimizerSteps() int {
	if t.zero != nil {
		return *t.zero.steps()
	}
	return t.adam.T
}

// saveShards writes this rank's moment shard into the checkpoint directory dir (rank 0's; ""
// elsewhere) with every other rank (saveMomentShards); without ZeRO it does nothing.
func (t *hfTrainer[P]) saveShards(dir string) error {
	if t.zero == nil {
		return nil
	}
	ps, err := t.s.model.Params()
	if err != nil {
		return err
	}
	ms, err := t.zero.moments()
	if err != nil {
		return err
	}
	return saveMomentShards(t.rctx, t.comm, dir, shardParamsOf(ps), ms)
}

// readMoments reads and verifies the checkpoint files names of dir and the optimizer's
// moments: optimizer.safetensors (whole, in files), or from a sharded checkpoint the shards
// (each whole file's ranges) that hold the values this rank owns now.
func (t *hfTrainer[P]) readMoments(dir string, ps []loop.Param, names ...string) (map[string][]byte, []loop.MomentShard, error) {
	if _, err := os.Stat(filepath.Join(dir, ckptShardIndex)); err != nil {
		files, err := readCheckpoint(dir, append(names, ckptOptimizer)...)
		return files, nil, err
	}
	params := shardParamsOf(ps)
	want := allValues(params)
	if t.zero != nil {
		want = want[:0]
		ms, err := t.zero.moments()
		if err != nil {
			return nil, nil, err
		}
		for _, s := range ms {
			want = append(want, [2]int{s.Lo, s.Hi})
		}
	}
	shardNames, err := shardFilesFor(dir, params, want)
	if err != nil {
		return nil, nil, err
	}
	files, err := readCheckpoint(dir, append(names, shardNames...)...)
	if err != nil {
		return nil, nil, err
	}
	shards, err := momentShards(dir, files, params, want)
	return files, shards, err
}

// setMoments sets AdamW's moments and step count from a checkpoint's: whole per-parameter
// ones (ms: exp_avg, exp_avg_sq) or shards written by any number of ranks. With ZeRO this
// rank keeps its ranges of them; without, it takes them all.
func (t *hfTrainer[P]) setMoments(ms [][][]float32, shards []loop.MomentShard, steps int) error {
	ps, err := t.s.model.Params()
	if err != nil {
		return err
	}
	if t.zero != nil {
		if shards == nil {
			var flat loop.MomentShard
			for i := range ms[0] {
				flat.M, flat.V = append(flat.M, ms[0][i]...), append(flat.V, ms[1][i]...)
			}
			flat.Hi = len(flat.M)
			shards = []loop.MomentShard{flat}
		}
		if err := t.zero.SetMoments(shards); err != nil {
			return err
		}
		*t.zero.steps() = steps
		return nil
	}
	if shards != nil {
		m, v, err := wholeFromShards(shards, shardParamsOf(ps))
		if err != nil {
			return err
		}
		ms = [][][]float32{m, v}
	}
	for i := range ms[0] {
		copy(t.adam.M[i], ms[0][i])
		copy(t.adam.V[i], ms[1][i])
	}
	t.adam.T = steps
	if t.devOpt != nil {
		return t.devOpt.LoadMoments()
	}
	return nil
}
