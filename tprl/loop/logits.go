package loop

import (
	"fmt"
	"math/rand/v2"

	"github.com/mtrl-go/mtrl/tensor"
)

// LogitsModel is a model that produces next-token logits: FromLogits makes it a Policy, with
// the log-probs, entropies and their backward computed by the fused tensor.LogProbEntropy,
// which never materialises the softmax.
type LogitsModel[P any] interface {
	Backend() tensor.Backend
	// Generate is Policy.Generate.
	Generate(prompts []P, s Sampling, rngs []*rand.Rand) ([]Completion, error)
	// Logits returns, for rows [lo, hi) of b, the logits [hi-lo, b.T, V] (float32 or bfloat16,
	// on Backend()) whose position t predicts completion token t. With train it also returns
	// the backward: the gradient of the loss with respect to those logits in, the parameter
	// gradients accumulated.
	Logits(b *Batch[P], lo, hi int, in Input, train bool) (Logits, error)
}

// Logits is one LogitsModel forward.
type Logits struct {
	Logits *tensor.Tensor
	// Backward propagates d loss / d Logits into the parameter gradients (train only).
	Backward func(dLogits *tensor.Tensor) error
	// Release, when not nil, frees what the forward kept (the logits and activations).
	Release func()
}

// FromLogits adapts m to a Policy (nil for a nil m). When m also implements Trainable, so does
// the result.
func FromLogits[P any](m LogitsModel[P]) Policy[P] {
	if m == nil {
		return nil
	}
	a := logitsPolicy[P]{m: m}
	if t, ok := m.(Trainable); ok {
		return trainableLogits[P]{a, t}
	}
	return a
}

type logitsPolicy[P any] struct{ m LogitsModel[P] }

type trainableLogits[P any] struct {
	logitsPolicy[P]
	Trainable
}

func (a logitsPolicy[P]) Backend() tensor.Backend { return a.m.Backend() }

// ReportFinal implements FinalGradients through the model when it does.
func (a logitsPolicy[P]) ReportFinal(hook func(...*tensor.Tensor)) bool {
	if f, ok := a.m.(FinalGradients); ok {
		return f.ReportFinal(hook)
	}
	return false
}

func (a logitsPolicy[P]) Generate(prompts []P, s Sampling, rngs []*rand.Rand) ([]Completion, error) {
	return a.m.Generate(prompts, s, rngs)
}

func (a logitsPolicy[P]) LogProbs(b *Batch[P], lo, hi int, in Input, logp, ent *tensor.Tensor) error {
	p, err := a.forward(b, lo, hi, in, false, logp, ent)
	if p != nil {
		p.Release()
	}
	return err
}

func (a logitsPolicy[P]) Forward(b *Batch[P], lo, hi int, logp, ent *tensor.Tensor) (Pass, error) {
	return a.forward(b, lo, hi, Input{}, true, logp, ent)
}

// forward runs the model and the fused log-prob op on the logits' backend; logp and ent are
// filled there or, on another backend, through a copy.
func (a logitsPolicy[P]) forward(b *Batch[P], lo, hi int, in Input, train bool, logp, ent *tensor.Tensor) (*logitsPass, error) {
	if err := checkRows(b, lo, hi, logp, ent); err != nil {
		return nil, err
	}
	out, err := a.m.Logits(b, lo, hi, in, train)
	if err != nil {
		return nil, err
	}
	if out.Logits == nil {
		if out.Release != nil {
			out.Release()
		}
		return nil, fmt.Errorf("loop: the model returned no logits")
	}
	p := &logitsPass{out: out, temp: b.Temperature}
	if err := p.run(b.Tokens(lo, hi), b.T, logp, ent); err != nil {
		p.Release()
		return nil, err
	}
	return p, nil
}

type logitsPass struct {
	out              Logits
	temp             float32
	targets, lp, ent *tensor.Tensor // on the logits' backend
	owned            []*tensor.Tensor
}

func (p *logitsPass) alloc(dt tensor.DType, shape ...int) (*tensor.Tensor, error) {
	t, err := tensor.New(p.out.Logits.Backend(), dt, shape...)
	if err == nil {
		p.owned = append(p.owned, t)
	}
	return t, err
}

// run computes the log-probs (and entropies) of the completions' tokens from the logits.
func (p *logitsPass) run(targets [][]int32, T int, logp, ent *tensor.Tensor) error {
	lg := p.out.Logits
	rows := len(targets)
	if s := lg.Shape(); len(s) != 3 || s[0] != rows || s[1] != T {
		return fmt.Errorf("loop: the model's logits have shape %v, want [%d, %d, V]", s, rows, T)
	}
	ids := make([]int32, rows*T)
	for r, t := range targets {
		copy(ids[r*T:(r+1)*T], t[:min(len(t), T)])
	}
	host, err := tensor.FromInt32(ids, rows, T)
	if err != nil {
		return err
	}
	if p.targets, err = tensor.To(lg.Backend(), host); err != nil {
		return err
	}
	if !p.targets.IsHost() {
		p.owned = append(p.owned, p.targets)
	}
	// Write straight into the caller's tensors when they live with the logits.
	p.lp, p.ent = logp, ent
	if logp.Backend() != lg.Backend() {
		if p.lp, err = p.alloc(tensor.Float32, rows, T); err != nil {
			return err
		}
	}
	if ent != nil && ent.Backend() != lg.Backend() {
		if p.ent, err = p.alloc(tensor.Float32, rows, T); err != nil {
			return err
		}
	}
	if ent == nil {
		err = tensor.LogProbs(p.lp, lg, p.targets, p.temp)
	} else {
		err = tensor.LogProbEntropy(p.lp, p.ent, lg, p.targets, p.temp)
	}
	if err != nil {
		return err
	}
	if p.lp != logp {
		if err := tensor.CopyInto(logp, p.lp); err != nil {
			return err
		}
	}
	if ent != nil && p.ent != ent {
		return tensor.CopyInto(ent, p.ent)
	}
	return nil
}

// onLogits returns x on the logits' backend (x itself, or a copy the pass owns).
func (p *logitsPass) onLogits(x *tensor.Tensor) (*tensor.Tensor, error) {
	if x == nil || x.Backend() == p.out.Logits.Backend() {
		return x, nil
	}
	c, err := p.alloc(tensor.Float32, x.Shape()...)
	if err != nil {
		return nil, err
	}
	return c, tensor.CopyInto(c, x)
}

func (p *logitsPass) Backward(dLogProbs, dEntropy *tensor.Tensor) error {
	if p.out.Backward == nil {
		return fmt.Errorf("loop: backward of a scoring pass (Logits was called with train=false)")
	}
	dlp, err := p.onLogits(dLogProbs)
	if err != nil {
		return err
	}
	dent, err := p.onLogits(dEntropy)
	if err != nil {
		return err
	}
	dlogits, err := p.alloc(tensor.Float32, p.out.Logits.Shape()...)
	if err != nil {
		return err
	}
	g := tensor.LogProbGrad{Logits: p.out.Logits, Targets: p.targets, LogProbs: p.lp, DLogProbs: dlp, Temperature: p.temp}
	if dent != nil {
		g.Entropy, g.DEntropy = p.ent, dent
	}
	if err := tensor.LogProbEntropyBackward(dlogits, g); err != nil {
		return err
	}
	return p.out.Backward(dlogits)
}

func (p *logitsPass) Release() {
	for _, t := range p.owned {
		_ = t.Release()
	}
	p.owned = nil
	if p.out.Release != nil {
		p.out.Release()
		p.out.Release = nil
	}
}

// checkRows checks a scoring call's batch, row range and [hi-lo, T] float32 outputs.
func checkRows[P any](b *Batch[P], lo, hi int, logp, ent *tensor.Tensor) error {
	switch {
	case b == nil:
		return fmt.Errorf("loop: nil batch")
	case len(b.Completions) != b.Len() || len(b.IDs) != b.Len():
		return fmt.Errorf("loop: batch of %d prompts has %d completions and %d ids", b.Len(), len(b.Completions), len(b.IDs))
	case lo < 0 || hi <= lo || hi > b.Len():
		return fmt.Errorf("loop: rows [%d, %d) are not a non-empty range of the batch's %d", lo, hi, b.Len())
	case !(b.Temperature > 0):
		return fmt.Errorf("loop: batch temperature %v, want > 0", b.Temperature)
	}
	for _, o := range []struct {
		name string
		t    *tensor.Tensor
	}{{"logp", logp}, {"ent", ent}} {
		if o.t == nil {
			if o.name == "logp" {
				return fmt.Errorf("loop: nil logp")
			}
			continue
		}
		if err := tensor.CheckDType("loop.Scorer.LogProbs", o.name, o.t, tensor.Float32); err != nil {
			return err
		}
		if err := tensor.CheckShape("loop.Scorer.LogProbs", o.name, o.t, hi-lo, b.T); err != nil {
			return err
		}
	}
	return nil
}
