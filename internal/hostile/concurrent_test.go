package hostile_test

import (
	"bytes"
	"fmt"
	"image"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/internal/hostile"
	"github.com/mtrl-go/mtrl/perturb"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl"
)

// shared are the read-only inputs every goroutine of TestConcurrentCalls uses at once.
type shared struct {
	logits, logits16, targets             *tensor.Tensor
	mask, old, logp, ref, adv, ent, score *tensor.Tensor
	rewards, index, ids                   *tensor.Tensor
	images, devOld                        *tensor.Tensor
	img                                   image.Image
}

func newShared(b, l, v int) *shared {
	r := rand.New(rand.NewPCG(1, 2))
	f32 := func(shape ...int) *tensor.Tensor {
		x := hostile.F32(shape...)
		d, _ := x.Float32s()
		for i := range d {
			d[i] = float32(r.NormFloat64())
		}
		return x
	}
	s := &shared{logits: f32(b, l, v), mask: hostile.Ones(b, l), old: f32(b, l), logp: f32(b, l), ref: f32(b, l),
		adv: f32(b, l), ent: f32(b, l), score: f32(b, l), rewards: f32(b, l), images: hostile.U8(b, 9, 11, 3)}
	m, _ := s.mask.Float32s()
	for i := range m {
		if r.IntN(4) == 0 {
			m[i] = 0
		}
	}
	lg, _ := s.logits.Float32s()
	b16 := make([]tensor.BF16, len(lg))
	for i, x := range lg {
		b16[i] = tensor.BF16FromFloat32(x)
	}
	s.logits16 = tensor.Must(tensor.FromBF16(b16, b, l, v))
	ys, ids := make([]int32, b*l), make([]int32, b)
	for i := range ys {
		ys[i] = int32(r.IntN(v))
	}
	for i := range ids {
		ids[i] = int32(i / 2)
	}
	s.targets = tensor.Must(tensor.FromInt32(ys, b, l))
	s.index = tensor.Must(tensor.FromInt32(ids, b))
	s.ids = tensor.Must(tensor.FromInt32(ys, b, l))
	s.devOld = hostile.OnDevice(s.old)
	s.img, _ = perturb.ToImage(tensor.Must(tensor.Must(s.images.Rows(0, 1)).Reshape(9, 11, 3)))
	return s
}

// inputs lists the shared tensors with names, for the no-modification check.
func (s *shared) inputs() map[string]*tensor.Tensor {
	return map[string]*tensor.Tensor{"logits": s.logits, "logits16": s.logits16, "targets": s.targets, "mask": s.mask,
		"old": s.old, "logp": s.logp, "ref": s.ref, "adv": s.adv, "ent": s.ent, "score": s.score, "rewards": s.rewards,
		"index": s.index, "ids": s.ids, "images": s.images, "devOld": s.devOld}
}

func snapshot(t *testing.T, x *tensor.Tensor) []byte {
	h, err := tensor.To(tensor.CPU(), x)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := h.Storage()
	return append([]byte(nil), st.(tensor.HostStorage).Bytes()...)
}

// bytesOf returns a result tensor's bytes (nil for nil).
func bytesOf(x *tensor.Tensor) []byte {
	if x == nil {
		return nil
	}
	h, err := tensor.To(tensor.CPU(), x)
	if err != nil {
		return []byte(err.Error())
	}
	st, _ := h.Storage()
	return append([]byte(nil), st.(tensor.HostStorage).Bytes()...)
}

func f64bytes(xs ...float64) []byte { return []byte(fmt.Sprint(xs)) }

// ops are the calls made concurrently: each allocates its own outputs, reads the shared
// inputs and returns its result as bytes, so runs can be compared bit for bit.
func ops(s *shared) map[string]func() ([]byte, error) {
	b, l := s.mask.Dim(0), s.mask.Dim(1)
	newF := func(shape ...int) *tensor.Tensor {
		return tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, shape...))
	}
	return map[string]func() ([]byte, error){
		"LogProbEntropy": func() ([]byte, error) {
			lp, ent := newF(b, l), newF(b, l)
			err := tensor.LogProbEntropy(lp, ent, s.logits, s.targets, 0.7)
			return append(bytesOf(lp), bytesOf(ent)...), err
		},
		"LogProbEntropy bf16": func() ([]byte, error) {
			lp, ent := newF(b, l), newF(b, l)
			err := tensor.LogProbEntropy(lp, ent, s.logits16, s.targets, 1)
			return append(bytesOf(lp), bytesOf(ent)...), err
		},
		"LogProbEntropyBackward": func() ([]byte, error) {
			d := newF(s.logits.Shape()...)
			err := tensor.LogProbEntropyBackward(d, tensor.LogProbGrad{Logits: s.logits, Targets: s.targets, LogProbs: s.logp,
				Entropy: s.ent, DLogProbs: s.adv, DEntropy: s.old, Temperature: 1})
			return bytesOf(d), err
		},
		"MaskedStats": func() ([]byte, error) {
			mean, err := tensor.MaskedMean(s.old, s.mask)
			if err != nil {
				return nil, err
			}
			v, err := tensor.MaskedVar(s.old, s.mask, true)
			w := newF(b, l)
			if err == nil {
				err = tensor.MaskedWhiten(w, s.old, s.mask)
			}
			return append(f64bytes(float64(mean), float64(v)), bytesOf(w)...), err
		},
		"TopPMask": func() ([]byte, error) {
			d := newF(b, l)
			err := tensor.TopPMask(d, s.ent, s.mask, 0.3)
			return bytesOf(d), err
		},
		"ResponseMask": func() ([]byte, error) {
			d := newF(b, l)
			err := tensor.ResponseMask(d, s.ids, 3)
			return bytesOf(d), err
		},
		"views and copies": func() ([]byte, error) {
			v, err := s.old.Rows(1, 3)
			if err != nil {
				return nil, err
			}
			r, err := v.Reshape(-1)
			if err != nil {
				return nil, err
			}
			d, err := tensor.To(hostile.Device(), r)
			if err != nil {
				return nil, err
			}
			back, err := tensor.To(tensor.CPU(), s.devOld)
			return append(bytesOf(d), bytesOf(back)...), err
		},
		"divergence": func() ([]byte, error) {
			p, sc := newF(b, l), newF(b, l)
			err := divergence.Penalty(p, s.logp, s.ref, divergence.LowVarKL)
			if err == nil {
				err = divergence.PerceptionScore(sc, s.old, s.logp)
			}
			return append(bytesOf(p), bytesOf(sc)...), err
		},
		"ppo": func() ([]byte, error) {
			g := newF(b, l)
			res, err := ppo.PolicyLoss(ppo.Grad{Dst: g}, ppo.PolicyInputs{OldLogProbs: s.old, LogProbs: s.logp, Advantages: s.adv, ResponseMask: s.mask}, ppo.DefaultPolicyConfig(ppo.Vanilla))
			if err != nil {
				return nil, err
			}
			kl, err := ppo.KLLoss(ppo.Grad{Dst: g}, s.logp, s.ref, s.mask, ppo.KLConfig{Kind: divergence.LowVarKL, Coef: 0.1})
			return append(f64bytes(float64(res.Loss), float64(kl.Loss)), bytesOf(g)...), err
		},
		"advantage": func() ([]byte, error) {
			a, a2 := newF(b, l), newF(b, l)
			in := advantage.Inputs{Rewards: s.rewards, ResponseMask: s.mask, Values: s.old, Index: s.index}
			err := advantage.Compute(a, in, advantage.DefaultConfig())
			if err == nil {
				err = advantage.Compute(a2, in, advantage.Config{Estimator: advantage.EstimatorGAE, Gamma: 0.99, Lambda: 0.95})
			}
			return append(bytesOf(a), bytesOf(a2)...), err
		},
		"tprl Apply": func() ([]byte, error) {
			c := tprl.DefaultConfig()
			c.EnableEntropyFiltering, c.EnablePerceptionFiltering, c.EnableTrajectoryReweighting = true, true, true
			res, err := c.Apply(tprl.Batch{ResponseMask: s.mask, Entropy: s.ent, PerceptionScore: s.score, Advantages: s.adv, MicroBatchSize: 2})
			if err != nil {
				return nil, err
			}
			defer res.Release()
			return append(bytesOf(res.LossTokenMask), bytesOf(res.Advantages)...), nil
		},
		"tprl Prepare+MicroBatch": func() ([]byte, error) {
			c := tprl.DefaultConfig()
			c.EnablePerceptionFiltering, c.EnableTrajectoryReweighting = true, true
			u, err := tprl.UpdateConfig{Tokens: c, Policy: ppo.DefaultPolicyConfig(ppo.Vanilla),
				KLLoss: &ppo.KLConfig{Kind: divergence.LowVarKL, Coef: 0.1}}.Prepare(
				tprl.MiniBatch{ResponseMask: s.mask, OldLogProbs: s.old, Advantages: s.adv, AugLogProbs: s.logp, RefLogProbs: s.ref})
			if err != nil {
				return nil, err
			}
			defer u.Release()
			g := newF(2, l)
			lp, _ := s.logp.Rows(0, 2)
			m, err := u.MicroBatch(g, tprl.MicroInputs{LogProbs: lp}, 0, 2)
			if err != nil {
				return nil, err
			}
			defer m.Release()
			return append(f64bytes(float64(m.Loss)), bytesOf(g)...), nil
		},
		"perturb": func() ([]byte, error) {
			d := tensor.Must(tensor.NewLike(s.images, tensor.Uint8))
			ids := make([]uint64, b)
			for i := range ids {
				ids[i] = uint64(i)
			}
			err := perturb.DefaultBlackening().ApplyBatch(d, s.images, 7, ids)
			n := tensor.Must(tensor.NewLike(s.images, tensor.Uint8))
			if err == nil {
				err = perturb.DefaultNoise().ApplyBatch(n, s.images, 7, ids)
			}
			out := append(bytesOf(d), bytesOf(n)...)
			if err == nil {
				var im image.Image
				im, err = perturb.ApplyImage(perturb.DefaultBlur(), s.img, 1, 2)
				if err == nil {
					out = append(out, im.(*image.NRGBA).Pix...)
				}
			}
			return out, err
		},
	}
}

// TestConcurrentCalls runs every op from many goroutines at once on shared inputs (run it
// with -race): each result equals the op's serial result bit for bit, and no shared input
// changes.
func TestConcurrentCalls(t *testing.T) {
	s := newShared(8, 12, 40)
	before := map[string][]byte{}
	for name, x := range s.inputs() {
		before[name] = snapshot(t, x)
	}
	calls := ops(s)
	want := map[string][]byte{}
	for name, op := range calls {
		out, err := op()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want[name] = out
	}
	const goroutines, reps = 8, 3
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*len(calls)*reps)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rep := range reps {
				for name, op := range calls { // map order differs per goroutine: ops interleave
					out, err := op()
					switch {
					case err != nil:
						errs <- fmt.Errorf("goroutine %d rep %d %s: %v", g, rep, name, err)
					case !bytes.Equal(out, want[name]):
						errs <- fmt.Errorf("goroutine %d rep %d %s: result differs from the serial one", g, rep, name)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for name, x := range s.inputs() {
		if !bytes.Equal(snapshot(t, x), before[name]) {
			t.Errorf("shared input %s was modified", name)
		}
	}
}
