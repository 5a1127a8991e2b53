package ppo

import (
	"math"
	"unsafe"

	"github.com/mtrl-go/mtrl/internal/enum"
	"github.com/mtrl-go/mtrl/internal/hostops"
	"github.com/mtrl-go/mtrl/internal/parallel"
	"github.com/mtrl-go/mtrl/tensor"
)

// LossType selects the policy objective (the reference's loss_type, docs/semantics.md#policy-loss).
type LossType int

const (
	// Vanilla is the PPO clipped objective with clip-higher and dual clip: the reference's
	// "default" loss type ("vanilla" as verl calls it is accepted too).
	Vanilla LossType = iota
	// GSPO uses the per-sequence importance ratio exp(mean_t(lp - old)) on every token; the
	// gradient flows through the sequence mean ("gspo").
	GSPO
	// GSPOToken uses the sequence ratio's value with a per-token gradient (the sequence mean is
	// detached, "gspo_token").
	GSPOToken
	// CISPO is -A * lp * clip(ratio) with the clipped ratio detached ("cispo").
	CISPO
	// SAPO is the soft-gated objective -A * (4/tau) * sigmoid(tau*(ratio-1)) with tau chosen by
	// the sign of A ("sapo"; upstream EasyR1, not in the VPPO fork).
	SAPO
)

var lossTypes = enum.Table[LossType]{Type: "ppo.LossType", Noun: "loss type",
	Names:  []string{Vanilla: "default", GSPO: "gspo", GSPOToken: "gspo_token", CISPO: "cispo", SAPO: "sapo"},
	Errorf: tensor.Errorf, Sentinel: tensor.ErrParam}

// String returns the reference's name of the loss type.
func (l LossType) String() string { return lossTypes.String(l) }

// Valid reports whether l is one of the defined loss types.
func (l LossType) Valid() bool { return lossTypes.Valid(l) }

// ParseLossType parses "default", "gspo", "gspo_token", "cispo" and "sapo", and "vanilla" as an
// alias of "default". Matching is exact; anything else is an ErrParam error.
func ParseLossType(s string) (LossType, error) {
	switch s {
	case "default", "vanilla":
		return Vanilla, nil
	case "gspo":
		return GSPO, nil
	case "gspo_token":
		return GSPOToken, nil
	case "cispo":
		return CISPO, nil
	case "sapo":
		return SAPO, nil
	}
	return 0, tensor.Errorf(tensor.ErrParam, "ppo.ParseLossType", "s", "unknown loss type %q (want default, vanilla, gspo, gspo_token, cispo or sapo)", s)
}

// MarshalText implements encoding.TextMarshaler with the name String returns; a value outside
// the defined constants is an error.
func (l LossType) MarshalText() ([]byte, error) { return lossTypes.MarshalText(l) }

// UnmarshalText implements encoding.TextUnmarshaler with ParseLossType, so configuration files
// (JSON, YAML) hold the name.
func (l *LossType) UnmarshalText(b []byte) error { return enum.UnmarshalText(l, b, ParseLossType) }

// The reference's defaults (EasyR1 ActorConfig; tau from upstream's SAPO).
const (
	DefaultClipLow  = 0.2
	DefaultClipHigh = 0.3
	DefaultClipDual = 3.0
	DefaultTauPos   = 1.0
	DefaultTauNeg   = 1.05
)

// logRatioClamp bounds the log importance ratio before exp (the reference's ±20).
const logRatioClamp = 20

// PolicyConfig configures PolicyLoss. Start from DefaultPolicyConfig (the reference's values:
// ClipLow 0.2, ClipHigh 0.3, ClipDual 3, TauPos 1, TauNeg 1.05, Agg token mean) and change
// fields: every field means what it says, a clip of 0 included, so the zero value
// PolicyConfig{} is invalid (ClipDual and the taus must be positive) and Validate says so.
type PolicyConfig struct {
	LossType LossType
	// ClipLow and ClipHigh bound the ratio to [1-ClipLow, 1+ClipHigh] (clip-higher when
	// ClipHigh > ClipLow). Used by Vanilla, GSPO, GSPOToken (clip) and CISPO (the weight).
	// ClipLow must lie in [0, 1]; ClipHigh must be >= 0 (+Inf disables the upper clip).
	ClipLow, ClipHigh float64
	// ClipDual is the dual-clip constant c: for A < 0 the per-token loss is at most -A*c.
	// It must be > 1 (+Inf disables the dual clip). Vanilla, GSPO and GSPOToken only.
	ClipDual float64
	// TauPos and TauNeg are SAPO's temperatures for A >= 0 and A < 0; they must be > 0.
	TauPos, TauNeg float64
	// Agg reduces the per-token loss (the reference's loss_avg_mode).
	Agg Agg
	// CheckFinite makes PolicyLoss return an ErrNotFinite error when an input holds NaN or
	// ±Inf (one extra read of the inputs). Without it, non-finite values at valid tokens
	// propagate into the loss and gradient (masked-out tokens are skipped).
	CheckFinite bool
}

// DefaultPolicyConfig returns the reference's defaults with the given loss type.
func DefaultPolicyConfig(t LossType) PolicyConfig {
	return PolicyConfig{
		LossType: t,
		ClipLow:  DefaultClipLow, ClipHigh: DefaultClipHigh, ClipDual: DefaultClipDual,
		TauPos: DefaultTauPos, TauNeg: DefaultTauNeg,
	}
}

// Validate reports an ErrParam error naming the bad field: an unknown loss type, ClipLow outside
// [0, 1], a negative ClipHigh, ClipDual <= 1, a non-positive or non-finite tau, a NaN anywhere,
// a bad Agg. Every field is checked whatever the loss type, so a zero ClipDual or tau is
// an error even where the loss type does not read it (start from DefaultPolicyConfig).
func (c PolicyConfig) Validate() error { return c.validate("ppo.PolicyConfig.Validate") }

func (c PolicyConfig) validate(op string) error {
	switch {
	case !c.LossType.Valid():
		return tensor.Errorf(tensor.ErrParam, op, "LossType", "unknown loss type %v", c.LossType)
	case !(c.ClipLow >= 0 && c.ClipLow <= 1):
		return tensor.Errorf(tensor.ErrParam, op, "ClipLow", "is %v, want a value in [0, 1]", c.ClipLow)
	case !(c.ClipHigh >= 0):
		return tensor.Errorf(tensor.ErrParam, op, "ClipHigh", "is %v, want a value >= 0", c.ClipHigh)
	case !(c.ClipDual > 1):
		return tensor.Errorf(tensor.ErrParam, op, "ClipDual", "is %v, want a value > 1 (+Inf disables the dual clip; ppo.DefaultPolicyConfig gives %v)", c.ClipDual, DefaultClipDual)
	case !(c.TauPos > 0) || math.IsInf(c.TauPos, 0):
		return tensor.Errorf(tensor.ErrParam, op, "TauPos", "is %v, want a finite value > 0 (ppo.DefaultPolicyConfig gives %v)", c.TauPos, DefaultTauPos)
	case !(c.TauNeg > 0) || math.IsInf(c.TauNeg, 0):
		return tensor.Errorf(tensor.ErrParam, op, "TauNeg", "is %v, want a finite value > 0 (ppo.DefaultPolicyConfig gives %v)", c.TauNeg, DefaultTauNeg)
	}
	return c.Agg.validate(op, "Agg")
}

// PolicyInputs are the tensors of PolicyLoss, all float32 [B, T] on one backend.
type PolicyInputs struct {
	OldLogProbs *tensor.Tensor // log-probs of the rollout policy
	LogProbs    *tensor.Tensor // log-probs of the current policy (the gradient is w.r.t. these)
	Advantages  *tensor.Tensor // A, per token
	// ResponseMask m is 1 on response tokens and 0 on padding (fractional weights work too).
	ResponseMask *tensor.Tensor
	// TokenMask is the optional TPRL loss_token_mask (nil for none): the per-token loss is
	// multiplied by it before averaging over ResponseMask. It is not intersected with m.
	TokenMask *tensor.Tensor
}

// PolicyResult is the outcome of PolicyLoss. The metrics follow the reference
// (docs/semantics.md#policy-loss); they ignore TokenMask and are not scaled.
type PolicyResult struct {
	// Loss is Grad.Scale * PGLoss, the value the caller backpropagates.
	Loss float32
	// PGLoss is the reference's pg_loss (unscaled).
	PGLoss float32
	// PPOKL is masked_mean(old - lp, m) (token level for every loss type).
	PPOKL float64
	// EntropyLoss is the reference's entropy_loss metric, average_loss(-lp, m, mode) broadcast
	// and masked-meaned again: x*S/(S+eps), 0 for an empty mask.
	EntropyLoss float64
	// ClipFracHigher is masked_mean(p1 < p2, m); ClipFracLower is
	// masked_mean((max(p1,p2) > -A*ClipDual) & (A < 0), m). Both are 0 for CISPO and SAPO,
	// whose Metrics omit them as the reference does.
	ClipFracHigher, ClipFracLower float64
	// LossType records which objective produced the result.
	LossType LossType
}

// Metrics returns the reference's metric dict: ppo_kl, entropy_loss, and for Vanilla, GSPO
// and GSPOToken also pg_clipfrac_higher and pg_clipfrac_lower.
func (r PolicyResult) Metrics() map[string]float64 {
	m := map[string]float64{"ppo_kl": r.PPOKL, "entropy_loss": r.EntropyLoss}
	if r.LossType != CISPO && r.LossType != SAPO {
		m["pg_clipfrac_higher"] = r.ClipFracHigher
		m["pg_clipfrac_lower"] = r.ClipFracLower
	}
	return m
}

// PolicyLossKernel is the optional backend kernel for PolicyLoss. It receives validated
// tensors (grad.Dst may be nil), grad.Scale filled in (never 0) and a validated config.
type PolicyLossKernel interface {
	PolicyLoss(grad Grad, in PolicyInputs, cfg PolicyConfig) (PolicyResult, error)
}

// PolicyLoss computes the reference's compute_policy_loss (docs/semantics.md#policy-loss) and,
// when grad.Dst is not nil, writes grad.Scale * d pg_loss / d LogProbs into it (float32 [B, T];
// added to it with grad.Accumulate). With nkl = lp - old, the log ratio lir is nkl (Vanilla, CISPO, SAPO),
// seq_i = masked_mean_t(nkl[i], m[i]) detached (GSPOToken) or seq_i * m[i,t] with the gradient
// through seq (GSPO, per row). ratio = exp(clamp(lir, -20, 20)) and
// clipped = exp(clamp(lir, log(1-ClipLow), log(1+ClipHigh))). The per-token loss is
//
//	Vanilla/GSPO/GSPOToken: hi = max(-A*ratio, -A*clipped); T = A < 0 ? min(hi, -A*ClipDual) : hi
//	CISPO:                  T = -A * lp * clipped   (clipped is a constant for the gradient)
//	SAPO:                   T = -A * (4/tau) * sigmoid(tau*(ratio-1)), tau = A >= 0 ? TauPos : TauNeg
//
// T is multiplied by TokenMask (if any) and reduced with cfg.Agg under ResponseMask. The
// gradient is analytic (no autograd); a clamp passes its gradient with both ends inclusive and a
// tie in max/min splits it half and half, as torch does. Masked-out tokens (m == 0) are skipped:
// their gradient is exactly 0 and non-finite values there do not propagate (the reference would
// turn a NaN under a zero mask into a NaN loss). Rows are processed in parallel; the result does
// not depend on GOMAXPROCS.
func PolicyLoss(grad Grad, in PolicyInputs, cfg PolicyConfig) (PolicyResult, error) {
	const op = "ppo.PolicyLoss"
	names := []string{"LogProbs", "OldLogProbs", "Advantages", "ResponseMask", "TokenMask", "grad.Dst"}
	ts := []*tensor.Tensor{in.LogProbs, in.OldLogProbs, in.Advantages, in.ResponseMask, in.TokenMask, grad.Dst}
	if err := checkBT(op, names, 4, ts...); err != nil {
		return PolicyResult{}, err
	}
	if err := cfg.validate(op); err != nil {
		return PolicyResult{}, err
	}
	grad, err := grad.check(op)
	if err != nil {
		return PolicyResult{}, err
	}
	if cfg.CheckFinite {
		for i := range 5 {
			if ts[i] != nil {
				if err := tensor.CheckFinite(op, names[i], ts[i]); err != nil {
					return PolicyResult{}, err
				}
			}
		}
	}
	if k, ok := tensor.KernelOf[PolicyLossKernel](in.LogProbs.Backend()); ok {
		return k.PolicyLoss(grad, in, cfg)
	}
	var res PolicyResult
	err = tensor.OnHost(1, []*tensor.Tensor{grad.Dst, in.OldLogProbs, in.LogProbs, in.Advantages, in.ResponseMask, in.TokenMask},
		func(h []*tensor.Tensor) error {
			s := make([][]float32, len(h))
			for i, t := range h {
				if t != nil {
					s[i], _ = t.Float32s()
				}
			}
			res, _ = policyHost(s[0], s[1], s[2], s[3], s[4], s[5], in.LogProbs.Dim(0), in.LogProbs.Dim(1), cfg, grad)
			return nil
		})
	return res, err
}

// policyRow holds one row's float64 partial sums; rows are combined in order.
type policyRow struct {
	sumT, sumNegLP, sumNegKL, clipHi, clipLo, cnt float64
}

// policyConsts are the per-call constants in the kernel's precision.
type policyConsts[F hostops.Float] struct {
	typ                LossType
	clo, chi, eLo, eHi F // log clip bounds and their exp
	rMin, rMax         F // exp(-20), exp(20)
	dual               F
	tauP, tauN         F
	fourP, fourN       F // 4/tau, computed in float64 as Python does
	scale              F
	acc                bool
	eps                F
}

// policyHost is the pure-Go kernel of PolicyLoss on row-major [rows, cols] slices. grad and ltm
// may be nil; opt gives the scale and accumulation (its Dst is not read). cfg must be validated.
// It also returns the unscaled loss in precision F (for the float64 gradient checks).
func policyHost[F hostops.Float](grad, old, lp, adv, m, ltm []F, rows, cols int, cfg PolicyConfig, opt Grad) (PolicyResult, F) {
	k := policyConsts[F]{
		typ:   cfg.LossType,
		clo:   F(math.Log(1 - cfg.ClipLow)),
		chi:   F(math.Log(1 + cfg.ClipHigh)),
		dual:  F(cfg.ClipDual),
		tauP:  F(cfg.TauPos),
		tauN:  F(cfg.TauNeg),
		fourP: F(4 / cfg.TauPos),
		fourN: F(4 / cfg.TauNeg),
		scale: F(opt.scale()),
		acc:   opt.Accumulate,
		eps:   F(DefaultEps),
	}
	k.eLo, k.eHi = hostops.Exp(k.clo), hostops.Exp(k.chi)
	k.rMin, k.rMax = hostops.Exp(F(-logRatioClamp)), hostops.Exp(F(logRatioClamp))

	// The vector kernels (Vanilla loss, float32) or the generic Go kernel.
	simd := policyImpls.Active()
	var k32 *policyConsts[float32]
	var s32 [6][]float32
	if simd != nil && k.simdOK() {
		k32, _ = any(&k).(*policyConsts[float32])
		for i, x := range [][]F{grad, old, lp, adv, m, ltm} {
			s32[i], _ = any(x).([]float32)
		}
	}

	// Pass 1: mask sums per row, for the aggregation weights.
	cnt := make([]float64, rows)
	grain := parallel.Grain(cols, 1<<13)
	if k32 != nil {
		// One goroutine handles up to 64K tokens: a [64, 1024] batch costs less than starting
		// goroutines would.
		grain = parallel.Grain(cols, 1<<16)
	}
	maskCounts(cnt, m, cols, grain)
	w := make([]F, rows)
	aggWeights(w, cnt, cfg.Agg)

	// Pass 2: per-token loss, gradient and metric sums, row by row.
	stats := make([]policyRow, rows)
	parallel.For(rows, grain, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			a, b := i*cols, (i+1)*cols
			if k32 != nil {
				g, ltm32 := s32[0], s32[5]
				stats[i] = policyRowSIMD(simd, k32, sub(g, a, b), s32[1][a:b], s32[2][a:b], s32[3][a:b], s32[4][a:b], sub(ltm32, a, b), float32(w[i]))
				stats[i].cnt = cnt[i]
				continue
			}
			var gr, lr []F
			if grad != nil {
				gr = grad[a:b]
			}
			if ltm != nil {
				lr = ltm[a:b]
			}
			stats[i] = policyRowKernel(&k, gr, old[a:b], lp[a:b], adv[a:b], m[a:b], lr, w[i])
			stats[i].cnt = cnt[i]
		}
	})

	// Combine in row order.
	sums := make([]float64, rows)
	negLP := make([]float64, rows)
	var s, kl, chiN, cloN float64
	for i, st := range stats {
		sums[i], negLP[i] = st.sumT, st.sumNegLP
		s += st.cnt
		kl += st.sumNegKL
		chiN += st.clipHi
		cloN += st.clipLo
	}
	pg := aggFinish[F](sums, cnt, cfg.Agg)
	ent := aggFinish[F](negLP, cnt, cfg.Agg)
	eps := F(DefaultEps)
	mean := func(x float64) float64 { return float64(F(x) / (F(s) + eps)) }
	res := PolicyResult{
		PGLoss:      float32(pg),
		Loss:        float32(pg * k.scale),
		PPOKL:       mean(kl),
		EntropyLoss: float64(ent * F(s) / (F(s) + eps)),
		LossType:    cfg.LossType,
	}
	if cfg.LossType != CISPO && cfg.LossType != SAPO {
		res.ClipFracHigher = mean(chiN)
		res.ClipFracLower = mean(cloN)
	}
	return res, pg
}

// clampGrad returns clamp(x, lo, hi) and whether the clamp passes the gradient (lo <= x <= hi;
// false for NaN, which passes through as torch.clamp does).
func clampGrad[F hostops.Float](x, lo, hi F) (F, bool) {
	if x < lo {
		return lo, false
	}
	if x > hi {
		return hi, false
	}
	return x, x == x
}

// expRatio is exp for |x| <= 20 (a clamped log ratio). In float32 it uses the inlinable
// hostops.ExpNonPos, with a reciprocal for positive x (about 3 ulp); in float64 math.Exp.
func expRatio[F hostops.Float](x F) F {
	var z F
	if unsafe.Sizeof(z) == 4 {
		a := float32(x)
		if a > 0 {
			return F(1 / hostops.ExpNonPos(-a))
		}
		return F(hostops.ExpNonPos(a))
	}
	return F(math.Exp(float64(x)))
}

// ratios returns ratio, d ratio/d lir, clipped and d clipped/d lir for log ratio x, with one exp.
func (k *policyConsts[F]) ratios(x F) (r, dr, c, dc F) {
	switch {
	case x < -logRatioClamp:
		r = k.rMin
	case x > logRatioClamp:
		r = k.rMax
	default:
		r = expRatio(x)
		dr = r
	}
	switch {
	case x < k.clo:
		c = k.eLo
	case x > k.chi:
		c = k.eHi
	case x == x && x >= -logRatioClamp && x <= logRatioClamp:
		c, dc = r, r
	default: // NaN, or bounds wider than the ratio clamp
		c, _ = clampGrad(x, k.clo, k.chi)
		c = hostops.Exp(c)
		if x == x {
			dc = c
		}
	}
	return
}

// token returns the per-token loss T, d T / d lir, and the clip indicators for log ratio x,
// log-prob lp and advantage a.
func (k *policyConsts[F]) token(x, lp, a F) (t, d F, clipHi, clipLo bool) {
	r, dr, c, dc := k.ratios(x)
	na := -a
	switch k.typ {
	case CISPO:
		return na * lp * c, na * c, false, false
	case SAPO:
		tau, four := k.tauP, k.fourP
		if a < 0 {
			tau, four = k.tauN, k.fourN
		}
		sg := 1 / (1 + hostops.Exp(-(tau * (r - 1))))
		return na * (four * sg), na * 4 * sg * (1 - sg) * dr, false, false
	}
	p1, p2 := na*r, na*c
	d1, d2 := na*dr, na*dc
	var hi, dhi F
	switch {
	case p1 > p2:
		hi, dhi = p1, d1
	case p2 > p1:
		hi, dhi = p2, d2
	case p1 == p2:
		hi, dhi = p1, (d1+d2)/2
	default: // NaN
		hi, dhi = p1+p2, d1+d2
	}
	clipHi = p1 < p2
	if !(a < 0) {
		return hi, dhi, clipHi, false
	}
	p3 := na * k.dual
	clipLo = hi > p3
	switch {
	case hi < p3:
		return hi, dhi, clipHi, clipLo
	case hi > p3:
		return p3, 0, clipHi, clipLo
	}
	return hi, dhi / 2, clipHi, clipLo
}

// policyRowKernel processes one row: it returns the row's partial sums and, when gr is not nil,
// writes (or adds) scale * w * m * ltm * dT/dlp.
func policyRowKernel[F hostops.Float](k *policyConsts[F], gr, old, lp, adv, m, ltm []F, w F) policyRow {
	var st policyRow
	n := len(m)
	old, lp, adv = old[:n], lp[:n], adv[:n]
	if gr != nil {
		gr = gr[:n]
	}
	if ltm != nil {
		ltm = ltm[:n]
	}
	// Sequence log ratio for GSPO / GSPOToken: masked_mean(nkl, m) of this row.
	var seq F
	var rowCnt float64
	if k.typ == GSPO || k.typ == GSPOToken {
		var s, c float64
		for t, mw := range m {
			if mw != 0 {
				s += float64((lp[t] - old[t]) * mw)
				c += float64(mw)
			}
		}
		seq = F(s) / (F(c) + k.eps)
		rowCnt = c
	}
	gw := k.scale * w
	// d loss / d seq (GSPO), accumulated in float64 like every other sum of the loss, so that
	// backends agree to the float32 rounding of the total whatever order they add in.
	var dseq float64
	for t, mw := range m {
		if mw == 0 {
			if gr != nil && !k.acc {
				gr[t] = 0
			}
			continue
		}
		nkl := lp[t] - old[t]
		x := nkl
		switch k.typ {
		case GSPOToken:
			x = (seq + lp[t]) - lp[t]
		case GSPO:
			x = seq * mw
		}
		T, d, ch, cl := k.token(x, lp[t], adv[t])
		lw := F(1)
		if ltm != nil {
			lw = ltm[t]
			T *= lw
		}
		st.sumT += float64(T * mw)
		st.sumNegLP += float64(-lp[t] * mw)
		st.sumNegKL += float64(-nkl * mw)
		if ch {
			st.clipHi += float64(mw)
		}
		if cl {
			st.clipLo += float64(mw)
		}
		if gr == nil {
			continue
		}
		g := gw * mw * lw * d
		if k.typ == GSPO {
			dseq += float64(g * mw)
			continue
		}
		if k.acc {
			gr[t] += g
		} else {
			gr[t] = g
		}
	}
	if gr != nil && k.typ == GSPO {
		// d seq / d lp[s] = m[s] / (n + eps)
		f := F(dseq) / (F(rowCnt) + k.eps)
		for t, mw := range m {
			if mw == 0 {
				continue
			}
			if k.acc {
				gr[t] += f * mw
			} else {
				gr[t] = f * mw
			}
		}
	}
	return st
}
