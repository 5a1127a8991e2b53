package loop

import (
	"context"
	"fmt"
	"time"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
	"github.com/mtrl-go/mtrl/tprl"
)

// miniBatchTotals are what every rank's share of a mini-batch needs from the whole of it.
type miniBatchTotals struct {
	tokens float64            // sum of the response mask (tprl.MiniBatch.GlobalTokens)
	stats  *tprl.ShapingStats // shaping statistics (GlobalScope); nil: the rank's own
}

// totals computes the totals of a whole mini-batch, which every rank holds after the gathers:
// identical on all ranks and equal to one rank's, with no collective. With
// trajectory_shaping_scope=per_micro_batch the statistics stay per rank, as in the reference.
func (l *Loop[P]) totals(mask, score *tensor.Tensor) (miniBatchTotals, error) {
	var g miniBatchTotals
	_, n, err := tensor.MaskedSum(mask, mask)
	if err != nil {
		return g, err
	}
	g.tokens = max(n, 1)
	tok := l.cfg.Update.Tokens
	if l.world() == 1 || !tok.Shaping() || tok.TrajectoryShapingScope != tprl.GlobalScope {
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

// update runs the PPO epochs over the step's mini-batches and returns the advantages the loss
// used ([B, T], shaped when trajectory shaping is on). With W ranks each takes a contiguous 1/W
// of every mini-batch (whole prompt groups when the mini-batch's prompts divide evenly), with
// the token count and shaping statistics of the whole mini-batch; the gradients are summed over
// ranks in the micro-batch order of one rank.
func (l *Loop[P]) update(ctx context.Context, st *tensor.Scratch, b *Batch[P], mask, oldLogp, score, refLogp, adv *tensor.Tensor, met map[string]float64) (*tensor.Tensor, error) {
	cfg := l.cfg
	B, T := b.Len(), b.T
	miniRows := cfg.MiniBatchPrompts * cfg.Sampling.N
	slo, shi := l.shard(miniRows)
	var commTime time.Duration
	var commBytes int64
	actor := map[string][]float64{}
	var gradNorms, lrs []float64
	shaped, err := st.New(tensor.Float32, B, T)
	if err != nil {
		return nil, err
	}
	var totals []miniBatchTotals
	for mlo := 0; mlo < B; mlo += miniRows {
		g, err := l.totals(tensor.Must(mask.Rows(mlo, mlo+miniRows)), rowsOrNil(score, mlo, mlo+miniRows))
		if err != nil {
			return nil, fmt.Errorf("update: %w", err)
		}
		totals = append(totals, g)
	}
	for range cfg.PPOEpochs {
		for mlo := 0; mlo < B; mlo += miniRows {
			local := func(x *tensor.Tensor) *tensor.Tensor { return rowsOrNil(x, mlo+slo, mlo+shi) }
			g := totals[mlo/miniRows]
			mb := tprl.MiniBatch{ResponseMask: local(mask), OldLogProbs: local(oldLogp), PerceptionScore: local(score),
				Advantages: local(adv), GlobalTokens: g.tokens, ShapingStats: g.stats,
				Random: tprl.RandomKey{Seed: cfg.Seed, Step: l.state.Step, FirstRow: mlo + slo}}
			if cfg.Update.KLLoss != nil {
				mb.RefLogProbs = local(refLogp)
			}
			upd, err := cfg.Update.Prepare(mb)
			if err != nil {
				return nil, fmt.Errorf("update: %w", err)
			}
			mbs := l.microBatches(b, mlo+slo, mlo+shi, cfg.UpdateRows)
			for i, r := range mbs {
				lo, hi := r[0], r[1]
				if err := l.microBatch(ctx, st, b, upd, shaped, lo, hi, lo-mlo-slo, hi-mlo-slo, i == len(mbs)-1); err != nil {
					_ = upd.Release()
					return nil, err
				}
			}
			t0 := time.Now()
			recv, err := l.parts.Gradients.Reduce(ctx, l.parts.Comm, 1/float32(l.world()))
			if err != nil {
				_ = upd.Release()
				return nil, fmt.Errorf("gradient reduction: %w", err)
			}
			if err := collective.AllGatherRows(ctx, l.parts.Comm, slo, shi, tensor.Must(shaped.Rows(mlo, mlo+miniRows))); err != nil {
				_ = upd.Release()
				return nil, err
			}
			commTime, commBytes = commTime+time.Since(t0), commBytes+recv
			lr := cfg.LR.At(l.parts.Optimizer.Steps(), l.OptimizerSteps())
			var norm float64
			if opt, ok := l.parts.Optimizer.(GroupOptimizer); ok {
				var recv int64
				norm, recv, err = opt.StepGroup(ctx, l.parts.Comm, lr, cfg.MaxGradNorm)
				commBytes += recv
			} else {
				norm, err = l.parts.Optimizer.Step(lr, cfg.MaxGradNorm)
			}
			if err != nil {
				_ = upd.Release()
				return nil, err
			}
			if !isFinite(norm) {
				l.state.Skipped++
			}
			lrs, gradNorms = append(lrs, lr), append(gradNorms, norm)
			um, err := l.gatherMetrics(ctx, upd.Metrics)
			if err == nil {
				err = upd.Release()
			}
			if err != nil {
				return nil, err
			}
			for k, v := range um {
				actor[k] = append(actor[k], mean(v))
			}
		}
	}
	for k, v := range actor {
		met[k] = mean(v)
	}
	met["actor/grad_norm"] = mean(gradNorms)
	met["actor/lr"] = mean(lrs)
	met["actor/skipped_steps"] = float64(l.state.Skipped)
	if l.world() > 1 {
		met["perf/allreduce_s"] = commTime.Seconds()
		met["perf/allreduce_bytes"] = float64(commBytes)
	}
	if v, ok := met["actor/ppo_kl"]; ok {
		met["actor/approx_kl"] = v
	}
	if v, ok := met["actor/entropy_loss"]; ok {
		met["actor/entropy"] = v
	}
	if hi, ok := met["actor/pg_clipfrac_higher"]; ok {
		met["actor/clipfrac"] = hi + met["actor/pg_clipfrac_lower"] // disjoint: above or below the range
	}
	return shaped, nil
}

// microBatch runs rows [lo, hi) of the batch (rows [ulo, uhi) of the prepared mini-batch):
// the policy's forward, tprl's loss and d loss / d log-probs, the policy's backward, and the
// gradient's collection. The advantages the loss used go into shaped. The backward of the
// mini-batch's last micro-batch runs next to the gradient reduction when it can (overlap).
func (l *Loop[P]) microBatch(ctx context.Context, st *tensor.Scratch, b *Batch[P], upd *tprl.Update, shaped *tensor.Tensor, lo, hi, ulo, uhi int, last bool) error {
	tmp := tensor.NewScratch(st.Backend())
	defer tmp.Release()
	logp, ent, err := float32x2(tmp, hi-lo, b.T)
	if err != nil {
		return err
	}
	grad, err := tmp.New(tensor.Float32, hi-lo, b.T)
	if err != nil {
		return err
	}
	pass, err := l.parts.Policy.Forward(b, lo, hi, logp, ent)
	if err != nil {
		return err
	}
	defer pass.Release()
	mr, err := upd.MicroBatch(grad, tprl.MicroInputs{LogProbs: logp, Entropy: ent}, ulo, uhi)
	if err != nil {
		return fmt.Errorf("update: %w", err)
	}
	err = tensor.CopyInto(tensor.Must(shaped.Rows(lo, hi)), mr.Advantages)
	if rerr := mr.Release(); err == nil {
		err = rerr
	}
	if err != nil {
		return err
	}
	var og OverlapGradients
	if last {
		if og, err = l.overlap(ctx); err != nil {
			return err
		}
	}
	err = pass.Backward(grad, nil)
	if og != nil {
		l.parts.Policy.(FinalGradients).ReportFinal(nil)
	}
	if err == nil {
		err = l.parts.Gradients.Collect()
	}
	if err != nil && og != nil {
		og.StopOverlap()
	}
	return err
}

// overlap starts the reduction next to the coming backward when the policy reports final
// gradients and the Gradients can reduce buckets early, on several ranks; it returns the
// Gradients then (nil: the reduction runs after the backward, in Reduce).
func (l *Loop[P]) overlap(ctx context.Context) (OverlapGradients, error) {
	og, ok := l.parts.Gradients.(OverlapGradients)
	fg, ok2 := l.parts.Policy.(FinalGradients)
	if !ok || !ok2 || l.world() == 1 || !fg.ReportFinal(nil) {
		return nil, nil
	}
	final, err := og.Overlap(ctx, l.parts.Comm, 1/float32(l.world()))
	if err != nil || final == nil {
		return nil, err
	}
	if !fg.ReportFinal(final) {
		og.StopOverlap()
		return nil, nil
	}
	return og, nil
}

// gatherMetrics joins the ranks' per-micro-batch metrics of one mini-batch in rank order, which
// is the micro-batch order of one rank.
func (l *Loop[P]) gatherMetrics(ctx context.Context, m map[string][]float64) (map[string][]float64, error) {
	if l.world() == 1 {
		return m, nil
	}
	all, err := collective.AllGatherValues(ctx, l.parts.Comm, []map[string][]float64{m})
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

func rowsOrNil(x *tensor.Tensor, lo, hi int) *tensor.Tensor {
	if x == nil {
		return nil
	}
	return tensor.Must(x.Rows(lo, hi))
}

// microBatches splits rows [lo, hi) into micro-batches: of rows rows, or by
// Config.MicroBatchTokens when it is set.
func (l *Loop[P]) microBatches(b *Batch[P], lo, hi, rows int) [][2]int {
	var out [][2]int
	budget := l.cfg.MicroBatchTokens
	if budget <= 0 {
		for s := lo; s < hi; s += rows {
			out = append(out, [2]int{s, min(s+rows, hi)})
		}
		return out
	}
	count := func(i int) int { return min(len(b.Completions[i].Tokens), b.T) }
	if tc, ok := l.parts.Policy.(TokenCounter[P]); ok {
		count = func(i int) int { return tc.RowTokens(b, i) }
	}
	start, tokens := lo, 0
	for i := lo; i < hi; i++ {
		n := count(i)
		if i > start && tokens+n > budget {
			out = append(out, [2]int{start, i})
			start, tokens = i, 0
		}
		tokens += n
	}
	if start < hi {
		out = append(out, [2]int{start, hi})
	}
	return out
}
