package ppo

import (
	"math"

	"github.com/mtrl-go/mtrl/internal/enum"
	"github.com/mtrl-go/mtrl/internal/hostops"
	"github.com/mtrl-go/mtrl/internal/parallel"
	"github.com/mtrl-go/mtrl/tensor"
)

// AggMode selects how a per-token loss [B, T] is reduced to a scalar (the reference's
// loss_avg_mode, docs/semantics.md#loss-aggregation, plus verl's loss_agg_mode names). With
// n_i = sum_t m[i,t], S = sum_i n_i and eps = 1e-8:
//
//	Token               sum(v*m) / (S + eps)                            "token", alias "token-mean"
//	Seq                 mean_i( sum_t(v*m)[i] / (n_i + eps) )           "seq", alias "seq-mean-token-mean"
//	SeqMeanTokenSum     mean_i( sum_t(v*m)[i] )                         "seq-mean-token-sum"
//	SeqMeanTokenSumNorm sum_i sum_t(v*m)[i] / Horizon                   "seq-mean-token-sum-norm"
//
// SeqMeanTokenSumNorm is verl's Dr. GRPO mode: the token sum of the whole batch divided by a
// constant horizon (verl's loss_scale_factor, by default the response length). Like verl it is
// not divided by B; divide by the number of sequences through Grad.Scale (verl scales
// each micro-batch by B_micro / B_mini) to get Dr. GRPO's 1/G. It needs Agg.Horizon > 0.
//
// An empty row contributes 0 but still counts in the Seq and SeqMeanTokenSum means. An empty
// batch (B == 0) gives 0 in every mode (the reference's mean over no rows would be NaN).
type AggMode int

const (
	// Token averages over all valid tokens of the batch (the reference's default).
	Token AggMode = iota
	// Seq averages within each sequence, then over sequences.
	Seq
	// SeqMeanTokenSum sums within each sequence, then averages over sequences.
	SeqMeanTokenSum
	// SeqMeanTokenSumNorm sums over all tokens and divides by Agg.Horizon.
	SeqMeanTokenSumNorm
)

var aggModes = enum.Table[AggMode]{Type: "ppo.AggMode", Noun: "aggregation mode",
	Names:  []string{Token: "token", Seq: "seq", SeqMeanTokenSum: "seq-mean-token-sum", SeqMeanTokenSumNorm: "seq-mean-token-sum-norm"},
	Errorf: tensor.Errorf, Sentinel: tensor.ErrParam}

// String returns the mode's canonical name: "token", "seq", "seq-mean-token-sum" or
// "seq-mean-token-sum-norm".
func (a AggMode) String() string { return aggModes.String(a) }

// Valid reports whether a is one of the defined modes.
func (a AggMode) Valid() bool { return aggModes.Valid(a) }

// ParseAggMode parses the reference's names ("token", "seq") and verl's ("token-mean",
// "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"). Matching is exact;
// anything else is an ErrParam error. ParseAggMode(m.String()) == m for every valid m.
func ParseAggMode(s string) (AggMode, error) {
	switch s {
	case "token", "token-mean":
		return Token, nil
	case "seq", "seq-mean-token-mean":
		return Seq, nil
	case "seq-mean-token-sum":
		return SeqMeanTokenSum, nil
	case "seq-mean-token-sum-norm":
		return SeqMeanTokenSumNorm, nil
	}
	return 0, tensor.Errorf(tensor.ErrParam, "ppo.ParseAggMode", "s", "unknown aggregation mode %q (want token, seq, token-mean, seq-mean-token-mean, seq-mean-token-sum or seq-mean-token-sum-norm)", s)
}

// MarshalText implements encoding.TextMarshaler with the name String returns; a value outside
// the defined constants is an error.
func (a AggMode) MarshalText() ([]byte, error) { return aggModes.MarshalText(a) }

// UnmarshalText implements encoding.TextUnmarshaler with ParseAggMode, so configuration files
// (JSON, YAML) hold the name.
func (a *AggMode) UnmarshalText(b []byte) error { return enum.UnmarshalText(a, b, ParseAggMode) }

// DefaultEps is the reference's average_loss / masked_mean epsilon.
const DefaultEps = 1e-8

// Agg is an aggregation mode with its parameters. The zero value is Token with eps 1e-8.
type Agg struct {
	Mode AggMode
	// Horizon is the constant divisor of SeqMeanTokenSumNorm (must be > 0 there; ignored
	// otherwise). verl's default is the padded response length T.
	Horizon int
	// Eps is added to the token counts of Token and Seq. 0 selects DefaultEps (1e-8); it must
	// not be negative. It is rounded to float32 as in the reference.
	Eps float64
}

// Validate reports an ErrParam error for an unknown mode, a negative or NaN Eps, or
// SeqMeanTokenSumNorm without a positive Horizon.
func (a Agg) Validate() error { return a.validate("ppo.Agg.Validate", "agg") }

func (a Agg) validate(op, arg string) error {
	if !a.Mode.Valid() {
		return tensor.Errorf(tensor.ErrParam, op, arg+".Mode", "unknown aggregation mode %v", a.Mode)
	}
	if !(a.Eps >= 0) || math.IsInf(a.Eps, 0) {
		return tensor.Errorf(tensor.ErrParam, op, arg+".Eps", "is %v, want a finite value >= 0", a.Eps)
	}
	if a.Mode == SeqMeanTokenSumNorm && a.Horizon <= 0 {
		return tensor.Errorf(tensor.ErrParam, op, arg+".Horizon", "is %d, mode %v needs a horizon > 0", a.Horizon, a.Mode)
	}
	return nil
}

func (a Agg) eps() float64 {
	if a.Eps == 0 {
		return DefaultEps
	}
	return a.Eps
}

// AverageLossKernel is the optional backend kernel for Agg.LossGrad. dst is nil for the
// forward-only call; agg has been validated.
type AverageLossKernel interface {
	AverageLoss(dst, values, mask *tensor.Tensor, agg Agg) (float32, error)
}

// Loss reduces values [B, T] under mask [B, T] (float32 0/1 or fractional weights) with a's
// mode, horizon and eps (docs/semantics.md#loss-aggregation).
func (a Agg) Loss(values, mask *tensor.Tensor) (float32, error) {
	return averageLoss("ppo.Agg.Loss", nil, values, mask, a)
}

// LossGrad is Loss that also writes d loss / d values into dst [B, T]: m[i,t]/(S+eps) (Token),
// m[i,t]/(B*(n_i+eps)) (Seq), m[i,t]/B (SeqMeanTokenSum) or m[i,t]/Horizon
// (SeqMeanTokenSumNorm). Masked positions get exactly 0.
func (a Agg) LossGrad(dst, values, mask *tensor.Tensor) (float32, error) {
	if dst == nil {
		return 0, tensor.Errorf(tensor.ErrShape, "ppo.Agg.LossGrad", "dst", "is nil")
	}
	return averageLoss("ppo.Agg.LossGrad", dst, values, mask, a)
}

func averageLoss(op string, dst, values, mask *tensor.Tensor, agg Agg) (float32, error) {
	if err := checkBT(op, []string{"values", "mask", "dst"}, 2, values, mask, dst); err != nil {
		return 0, err
	}
	if err := agg.validate(op, "mode"); err != nil {
		return 0, err
	}
	if k, ok := tensor.KernelOf[AverageLossKernel](values.Backend()); ok {
		return k.AverageLoss(dst, values, mask, agg)
	}
	var loss float32
	err := tensor.OnHost(1, []*tensor.Tensor{dst, values, mask}, func(h []*tensor.Tensor) error {
		var g []float32
		if h[0] != nil {
			g, _ = h[0].Float32s()
		}
		v, _ := h[1].Float32s()
		m, _ := h[2].Float32s()
		loss = averageLossHost(g, v, m, values.Dim(0), values.Dim(1), agg)
		return nil
	})
	return loss, err
}

// averageLossHost is the pure-Go kernel of AverageLoss on row-major [rows, cols] slices; grad
// may be nil.
func averageLossHost[F hostops.Float](grad, v, m []F, rows, cols int, agg Agg) F {
	cnt := make([]float64, rows)
	sums := make([]float64, rows)
	parallel.For(rows, parallel.Grain(cols, 1<<14), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			vr, mr := v[i*cols:(i+1)*cols], m[i*cols:(i+1)*cols]
			var s, n float64
			for t, w := range mr {
				if w != 0 {
					s += float64(vr[t] * w)
					n += float64(w)
				}
			}
			sums[i], cnt[i] = s, n
		}
	})
	if grad != nil {
		w := make([]F, rows)
		aggWeights(w, cnt, agg)
		parallel.For(rows, parallel.Grain(cols, 1<<14), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				gr, mr := grad[i*cols:(i+1)*cols], m[i*cols:(i+1)*cols]
				for t, mw := range mr {
					gr[t] = w[i] * mw
				}
			}
		})
	}
	return aggFinish[F](sums, cnt, agg)
}

// Weights writes w[i] such that d loss / d v[i,t] = w[i] * m[i,t], from the per-row mask sums
// counts[i]: the small per-call plan a backend kernel of AverageLoss, PolicyLoss or ValueLoss
// applies per row. It is the pure-Go kernels' own float32 arithmetic, so a device kernel that
// uses it cannot drift from them. w and counts have one entry per row; when their lengths
// differ every w[i] is NaN.
func (a Agg) Weights(w []float32, counts []float64) {
	if len(w) != len(counts) {
		for i := range w {
			w[i] = float32(math.NaN())
		}
		return
	}
	aggWeights(w, counts, a)
}

// Finish reduces per-row float64 masked sums and mask sums to the aggregated loss, combining the
// rows in order as the pure-Go kernels do (see Weights); NaN when sums and counts differ in
// length.
func (a Agg) Finish(sums, counts []float64) float32 {
	if len(sums) != len(counts) {
		return float32(math.NaN())
	}
	return aggFinish[float32](sums, counts, a)
}

// aggWeights writes w[i] with d loss / d v[i,t] = w[i] * m[i,t], given the per-row mask sums.
// The float order follows torch's autograd of the reference expression.
func aggWeights[F hostops.Float](w []F, cnt []float64, agg Agg) {
	eps := F(agg.eps())
	switch agg.Mode {
	case Token:
		var s float64
		for _, n := range cnt {
			s += n
		}
		inv := 1 / (F(s) + eps)
		for i := range w {
			w[i] = inv
		}
	case Seq:
		invB := 1 / F(len(w))
		for i, n := range cnt {
			w[i] = invB / (F(n) + eps)
		}
	case SeqMeanTokenSum:
		invB := 1 / F(len(w))
		for i := range w {
			w[i] = invB
		}
	case SeqMeanTokenSumNorm:
		inv := 1 / F(agg.Horizon)
		for i := range w {
			w[i] = inv
		}
	}
}

// aggFinish reduces per-row masked sums (float64) and mask sums to the loss, rounding to F where
// the reference computes in float32. Rows are combined in order, so the result does not depend
// on how the rows were split across goroutines.
func aggFinish[F hostops.Float](sums, cnt []float64, agg Agg) F {
	rows := len(sums)
	eps := F(agg.eps())
	switch agg.Mode {
	case Token:
		var s, n float64
		for i := range sums {
			s += sums[i]
			n += cnt[i]
		}
		return F(s) / (F(n) + eps)
	case Seq:
		if rows == 0 {
			return 0
		}
		var acc float64
		for i := range sums {
			acc += float64(F(sums[i]) / (F(cnt[i]) + eps))
		}
		return F(acc / float64(rows))
	case SeqMeanTokenSum:
		if rows == 0 {
			return 0
		}
		var acc float64
		for _, s := range sums {
			acc += s
		}
		return F(acc / float64(rows))
	case SeqMeanTokenSumNorm:
		var acc float64
		for _, s := range sums {
			acc += s
		}
		return F(acc) / F(agg.Horizon)
	}
	return 0
}

// checkBT validates that the first nReq tensors are non-nil and that every non-nil tensor is
// float32, shaped like the first (which must be [B, T]) and on its backend. Names label the
// tensors in errors.
func checkBT(op string, names []string, nReq int, ts ...*tensor.Tensor) error {
	for i := range nReq {
		if ts[i] == nil {
			return tensor.Errorf(tensor.ErrShape, op, names[i], "is nil")
		}
	}
	if err := tensor.CheckShape(op, names[0], ts[0], -1, -1); err != nil {
		return err
	}
	for i, t := range ts {
		if t == nil {
			continue
		}
		if i > 0 {
			if err := tensor.CheckSameShape(op, names[0], ts[0], names[i], t); err != nil {
				return err
			}
		}
		if err := tensor.CheckDType(op, names[i], t, tensor.Float32); err != nil {
			return err
		}
	}
	return tensor.CheckSameBackend(op, names, ts...)
}

// maskCounts writes sum_t m[i, t] of each row of the row-major [len(cnt), cols] mask into cnt,
// in float64; float32 masks use the vector sum of internal/hostops. Rows are independent, so the
// result does not depend on grain or GOMAXPROCS.
func maskCounts[F hostops.Float](cnt []float64, m []F, cols, grain int) {
	m32, is32 := any(m).([]float32)
	parallel.For(len(cnt), grain, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			if is32 {
				r := m32[i*cols : (i+1)*cols]
				_, cnt[i] = hostops.MaskedSum(r, r)
				continue
			}
			var n float64
			for _, w := range m[i*cols : (i+1)*cols] {
				n += float64(w)
			}
			cnt[i] = n
		}
	})
}
