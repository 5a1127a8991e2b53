package main

import (
	"bytes"
	"context"
	"encoding/gob"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/mtrl-go/mtrl/examples/internal/vlm"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
	"github.com/mtrl-go/mtrl/tprl"
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
func (t *Trainer) shard(n int) (lo, hi int) {
	w, r := t.world(), t.rank()
	return r * n / w, (r + 1) * n / w
}

func (t *Trainer) ctxOrBackground() context.Context {
	if t.ctx == nil {
		return context.Background()
	}
	return t.ctx
}

// gatherValues all-gathers every rank's local values (its shard, in order) into the global
// slice: shards are contiguous and in rank order, so concatenation is the row order.
func gatherValues[T any](t *Trainer, local []T) ([]T, error) {
	if t.world() == 1 {
		return local, nil
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(local); err != nil {
		return nil, fmt.Errorf("gather: %w", err)
	}
	parts, err := collective.AllGatherBytes(t.ctxOrBackground(), t.comm, buf.Bytes())
	if err != nil {
		return nil, err
	}
	var out []T
	for r, p := range parts {
		var v []T
		if err := gob.NewDecoder(bytes.NewReader(p)).Decode(&v); err != nil {
			return nil, fmt.Errorf("gather: rank %d: %w", r, err)
		}
		out = append(out, v...)
	}
	return out, nil
}

// gatherRows fills rows outside this rank's shard [lo, hi) of the float32 tensors (each
// [B, ...], this rank's rows already computed) from the other ranks. A device tensor goes
// through the host (no NCCL here): its shard comes down, the other ranks' rows go up.
func (t *Trainer) gatherRows(lo, hi int, ts ...*tensor.Tensor) error {
	if t.world() == 1 {
		return nil
	}
	for _, x := range ts {
		if x == nil {
			continue
		}
		if !x.IsHost() {
			if err := t.gatherDeviceRows(lo, hi, x); err != nil {
				return err
			}
			continue
		}
		v, err := x.Float32s()
		if err != nil {
			return err
		}
		per := len(v) / x.Dim(0)
		all, err := collective.AllGatherBytes(t.ctxOrBackground(), t.comm, collective.Float32Bytes(v[lo*per:hi*per]))
		if err != nil {
			return err
		}
		off := 0
		for _, p := range all {
			collective.BytesFloat32(v[off:off+len(p)/4], p)
			off += len(p) / 4
		}
		if off != len(v) {
			return fmt.Errorf("gather: %d values from the ranks, want %d", off, len(v))
		}
	}
	return nil
}

// gatherDeviceRows is gatherRows of a device tensor x: only this rank's rows come down and
// only the others' go up.
func (t *Trainer) gatherDeviceRows(lo, hi int, x *tensor.Tensor) error {
	h, err := tensor.New(tensor.CPU(), tensor.Float32, x.Shape()...)
	if err != nil {
		return err
	}
	if hi > lo {
		if err := tensor.CopyInto(tensor.Must(h.Rows(lo, hi)), tensor.Must(x.Rows(lo, hi))); err != nil {
			return err
		}
	}
	if err := t.gatherRows(lo, hi, h); err != nil {
		return err
	}
	for _, r := range [][2]int{{0, lo}, {hi, x.Dim(0)}} {
		if r[1] > r[0] {
			if err := tensor.CopyInto(tensor.Must(x.Rows(r[0], r[1])), tensor.Must(h.Rows(r[0], r[1]))); err != nil {
				return err
			}
		}
	}
	return nil
}

// shardedLogProbs computes log-probs (and entropies when ent is not nil) [B, T] (host or
// device tensors) of b's response tokens under m for this rank's rows, in chunks of micro rows without keeping activations
// (onAct, when set, sees each chunk's), and gathers the other ranks' rows.
func (t *Trainer) shardedLogProbs(m *vlm.Model, b *batch, images, logp, ent *tensor.Tensor, micro int, temp float32, onAct func(act *vlm.Activations, lo, hi int) error) error {
	lo, hi := t.shard(b.rows)
	for s := lo; s < hi; s += micro {
		e := min(s+micro, hi)
		ml, act, err := t.forwardResponse(m, b, images, s, e)
		if err != nil {
			return err
		}
		if onAct != nil {
			if err := onAct(act, s, e); err != nil {
				act.Release()
				ml.release()
				return err
			}
		}
		act.Release()
		var er *tensor.Tensor
		if ent != nil {
			er = tensor.Must(ent.Rows(s, e))
		}
		err = ml.logProbs(tensor.Must(logp.Rows(s, e)), er, temp)
		ml.release()
		if err != nil {
			return err
		}
	}
	return t.gatherRows(lo, hi, logp, ent)
}

// rowRNG is the random source of one sampled row: a function of (seed, step, round, row)
// only, so samples do not depend on the number of ranks or on which rows share a batch.
func (t *Trainer) rowRNG(round, row int) *rand.Rand {
	return rand.New(rand.NewPCG(t.cfg.Training.Seed^0x726f6c6c6f7574, uint64(t.step)<<40|uint64(round)<<32|uint64(row)))
}

// generateShard samples this rank's rows of a rollout round and gathers every rank's.
func (t *Trainer) generateShard(images *tensor.Tensor, prompts [][]int32, round int) ([][]int32, error) {
	ro := t.cfg.Worker.Rollout
	lo, hi := t.shard(len(prompts))
	var out [][]int32
	if hi > lo {
		rngs := make([]*rand.Rand, hi-lo)
		for i := range rngs {
			rngs[i] = t.rowRNG(round, lo+i)
		}
		var err error
		if out, err = t.model.GenerateRows(tensor.Must(images.Rows(lo, hi)), prompts[lo:hi], t.respLen, ro.Temperature, ro.TopP, ro.TopK, rngs); err != nil {
			return nil, err
		}
	}
	return gatherValues(t, out)
}

// collectGrad moves the gradient of the micro-batch just backpropagated out of m onto the end
// of t.microGrads (and zeroes m's), so that reduceGrads can add the micro-batches in one fixed
// order. On one device the sum runs there, in the same order, and nothing is moved.
func (t *Trainer) collectGrad(m *vlm.Model) error {
	if t.onDevice(m) {
		if t.world() == 1 {
			return t.dev.accumulate(m)
		}
		var err error
		t.microGrads, err = t.dev.appendGrad(m, t.microGrads)
		return err
	}
	_, gs := paramSlices(m)
	for _, g := range gs {
		t.microGrads = append(t.microGrads, g...)
	}
	m.ZeroGrad()
	return nil
}

// reduceGrads sets m's gradients to scale × the sum of every rank's collected micro-batch
// gradients, added left to right in the global micro-batch order (rank 0's first, in their
// order, then rank 1's, …): the order of one device. Every micro-batch's gradient is the same
// bits on any number of ranks (the same rows; the token scaling times W is exact for W a power
// of two and undone by scale = 1/W), so the sum — and every replica's weights — equal one
// device's bit for bit. The price is an all-gather of each micro-batch's gradient instead of
// a ring all-reduce of one (perf/allreduce_bytes), which suits this model, not a 7B one.
func (t *Trainer) reduceGrads(m *vlm.Model, scale float32) error {
	dev := t.onDevice(m)
	if dev && t.world() == 1 {
		return t.dev.finish(m, scale)
	}
	t0 := time.Now()
	var gs [][]float32
	if !dev {
		_, gs = paramSlices(m)
	}
	per := m.NumParams()
	local := t.microGrads
	t.microGrads = nil
	if len(local) == 0 {
		return fmt.Errorf("gradient reduction: no micro-batch on rank %d", t.rank())
	}
	var all [][]float32 // the micro-batches' gradients in the global order
	if t.world() == 1 {
		for off := 0; off+per <= len(local); off += per {
			all = append(all, local[off:off+per])
		}
	} else {
		parts, err := collective.AllGatherBytes(t.ctxOrBackground(), t.comm, collective.Float32Bytes(local))
		if err != nil {
			return fmt.Errorf("gradient all-gather: %w", err)
		}
		for _, p := range parts {
			v := make([]float32, len(p)/4)
			collective.BytesFloat32(v, p)
			for off := 0; off+per <= len(v); off += per {
				all = append(all, v[off:off+per])
			}
			t.commBytes += float64(len(p))
		}
	}
	acc := all[0]
	for _, g := range all[1:] {
		for i, x := range g {
			acc[i] += x
		}
	}
	if scale != 1 {
		for i := range acc {
			acc[i] *= scale
		}
	}
	if dev {
		if err := t.dev.setGrad(m, acc); err != nil {
			return err
		}
	}
	off := 0
	for _, g := range gs {
		copy(g, acc[off:off+len(g)])
		off += len(g)
	}
	if t.world() > 1 {
		t.commTime += time.Since(t0)
	}
	return nil
}

// testRankFail, when set (tests), runs on every rank in each RL step after the mini-batch is
// prepared; an error it returns is that rank's failure.
var testRankFail func(rank, step int) error

// miniBatchTotals are what every rank's share of a mini-batch needs from the whole of it.
type miniBatchTotals struct {
	tokens float64            // sum of the response mask (GlobalTokens)
	stats  *tprl.ShapingStats // shaping statistics (GlobalScope); nil: the rank's own
}

// globalMiniBatch computes the totals of a whole mini-batch, which every rank holds after the
// gathers: identical on all ranks and equal to one device's, with no collective. With
// trajectory_shaping_scope=per_micro_batch the statistics stay per rank, as in the reference
// (its range is the device's mini-batch).
func (t *Trainer) globalMiniBatch(mask, score *tensor.Tensor) (miniBatchTotals, error) {
	var g miniBatchTotals
	_, n, err := tensor.MaskedSum(mask, mask)
	if err != nil {
		return g, err
	}
	g.tokens = max(n, 1)
	if t.world() == 1 || !t.update.Tokens.Shaping() || t.update.Tokens.TrajectoryShapingScope != tprl.GlobalScope {
		return g, nil
	}
	st, err := tprl.ShapingStatsOfScore(score, mask)
	if err != nil {
		return g, err
	}
	g.stats = &st
	return g, nil
}

// overwritten are the actor metrics the reference overwrites per micro-batch (the last one
// counts); the others are appended per micro-batch.
var overwritten = map[string]bool{"actor/kl_loss": true, "actor/kl_coef": true, "actor/entropy_penalty_coef": true}

// gatherMetrics joins the ranks' per-micro-batch metrics of one mini-batch in rank order, which
// is the micro-batch order of one device.
func (t *Trainer) gatherMetrics(m map[string][]float64) (map[string][]float64, error) {
	if t.world() == 1 {
		return m, nil
	}
	all, err := gatherValues(t, []map[string][]float64{m})
	if err != nil {
		return nil, err
	}
	out := map[string][]float64{}
	for _, rm := range all {
		for k, v := range rm {
			if overwritten[k] {
				out[k] = v
			} else {
				out[k] = append(out[k], v...)
			}
		}
	}
	return out, nil
}

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
}
