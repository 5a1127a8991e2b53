package loop_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/internal/hostile"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// onDevice is the tiny model with its weights and gradient on a backend whose memory is not
// the host's (internal/hostile): it computes with the device weights and adds its gradient to
// the device's, as a model on a GPU does.
type onDevice struct {
	*tiny
	dw, dg *tensor.Tensor
}

func newOnDevice(m *tiny) *onDevice {
	return &onDevice{tiny: m, dw: tensor.Must(tensor.To(hostile.Device(), m.w)), dg: tensor.Must(tensor.To(hostile.Device(), m.g))}
}

// params are splitParams' three parameters of the device tensors.
func (d *onDevice) params() []loop.Param {
	return splitParams(&tiny{w: d.dw, g: d.dg})
}

func (d *onDevice) Generate(ps []prompt, s loop.Sampling, rngs []*rand.Rand) ([]loop.Completion, error) {
	if err := tensor.CopyInto(d.w, d.dw); err != nil {
		return nil, err
	}
	return d.tiny.Generate(ps, s, rngs)
}

func (d *onDevice) Logits(b *loop.Batch[prompt], lo, hi int, in loop.Input, train bool) (loop.Logits, error) {
	if err := tensor.CopyInto(d.w, d.dw); err != nil {
		return loop.Logits{}, err
	}
	out, err := d.tiny.Logits(b, lo, hi, in, train)
	if err != nil || out.Backward == nil {
		return out, err
	}
	back := out.Backward
	out.Backward = func(dl *tensor.Tensor) error {
		g, _ := d.g.Float32s()
		clear(g)
		if err := back(dl); err != nil {
			return err
		}
		acc := tensor.Must(tensor.To(tensor.CPU(), d.dg))
		a, _ := acc.Float32s()
		for i, x := range g {
			a[i] += x
		}
		return tensor.CopyInto(d.dg, acc)
	}
	return out, nil
}

// TestOffloadBitIdentical: with the weights and gradients on a device and the optimizer
// offloaded (its masters, moments and the reduction on the host), the loop takes the host
// run's steps bit for bit, metrics and weights, unsharded on 1 and 2 ranks and with ZeRO-2 on 2
// and 4: the host adds the downloaded gradients as it adds its own, and the step is the same
// AdamW on the same values.
func TestOffloadBitIdentical(t *testing.T) {
	want := runRanks(t, 1, 3, unsharded)
	rc := loop.ReduceConfig{Ordered: true, BucketBytes: smallBuckets}
	for name, md := range map[string]mode{"unsharded": unsharded, "zero2": sharded(loop.ShardGradients, rc)} {
		for _, size := range []int{1, 2, 4} {
			t.Run(fmt.Sprint(name, "/", size), func(t *testing.T) {
				got := runOffloaded(t, size, 3, md)
				for r := range size {
					require.Equal(t, want.weights[0], got.weights[r], "rank %d weights", r)
					assert.Equal(t, want.metrics[0], got.metrics[r], "rank %d metrics", r)
				}
			})
		}
	}
}

func runOffloaded(t *testing.T, size, n int, md mode) run {
	t.Helper()
	out := run{metrics: make([][]map[string]float64, size), weights: make([][]float32, size)}
	err := collective.Run(context.Background(), size, func(ctx context.Context, c collective.Comm) error {
		s := newSetup()
		d := newOnDevice(s.model)
		p := loop.Parts[prompt]{Policy: loop.FromLogits[prompt](d), Rewards: s.rewards, Data: s.data, Comm: c}
		off, err := loop.NewOffload(d.params())
		if err != nil {
			return err
		}
		g, opt, err := md(off.Params(), c.Rank(), c.Size())
		if err != nil {
			return err
		}
		p.Gradients, p.Optimizer = off.Gradients(g), off.Optimizer(opt)
		uploads := 0
		off.Uploaded = func() error { uploads++; return nil }
		l, err := loop.New(s.cfg, p)
		if err != nil {
			return err
		}
		out.metrics[c.Rank()] = steps(t, l, n)
		if uploads != n*s.cfg.Prompts/s.cfg.MiniBatchPrompts*s.cfg.PPOEpochs {
			return fmt.Errorf("rank %d: %d uploads in %d steps", c.Rank(), uploads, n)
		}
		out.weights[c.Rank()] = weights(&tiny{w: tensor.Must(tensor.To(tensor.CPU(), d.dw))})
		host := weights(&tiny{w: tensor.Must(tensor.FromFloat32(flat(off.Params()), 4*respLen, vocab))})
		if !assert.Equal(t, host, out.weights[c.Rank()], "masters and device weights") {
			return fmt.Errorf("rank %d: the device weights are not the masters", c.Rank())
		}
		down, up := off.Bytes()
		t.Logf("rank %d: %d bytes down, %d up", c.Rank(), down, up)
		return nil
	})
	require.NoError(t, err)
	return out
}

func flat(ps []loop.Param) []float32 {
	var out []float32
	for _, p := range ps {
		w, _ := p.Value.Float32s()
		out = append(out, w...)
	}
	return out
}

// TestOffloadErrors: parameters in host memory, of another dtype, without a gradient or of
// mismatched sizes are refused.
func TestOffloadErrors(t *testing.T) {
	dev := func(dt tensor.DType, n int) *tensor.Tensor { return tensor.Must(tensor.New(hostile.Device(), dt, n)) }
	host := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 3))
	for name, ps := range map[string][]loop.Param{
		"none":      nil,
		"host":      {{Name: "w", Value: host, Grad: dev(tensor.Float32, 3)}},
		"nil grad":  {{Name: "w", Value: dev(tensor.Float32, 3)}},
		"int32":     {{Name: "w", Value: dev(tensor.Int32, 3), Grad: dev(tensor.Float32, 3)}},
		"bf16 grad": {{Name: "w", Value: dev(tensor.Float32, 3), Grad: dev(tensor.BFloat16, 3)}},
		"sizes":     {{Name: "w", Value: dev(tensor.Float32, 3), Grad: dev(tensor.Float32, 4)}},
	} {
		_, err := loop.NewOffload(ps)
		assert.Error(t, err, name)
	}
}

// TestOffloadBF16: a bfloat16 device value gets the float32 master rounded to bfloat16 (ties to
// even) at Upload, and Download widens it.
func TestOffloadBF16(t *testing.T) {
	w := tensor.Must(tensor.New(hostile.Device(), tensor.BFloat16, 2, 2))
	g := tensor.Must(tensor.New(hostile.Device(), tensor.Float32, 2, 2))
	o, err := loop.NewOffload([]loop.Param{{Name: "w", Value: w, Grad: g}})
	require.NoError(t, err)
	m, _ := o.Params()[0].Value.Float32s()
	assert.Equal(t, []float32{0, 0, 0, 0}, m)
	copy(m, []float32{1 + 1.0/256, 1 + 3.0/256, -2.5, 1e-3})
	require.NoError(t, o.Upload())
	hb, _ := tensor.Must(tensor.To(tensor.CPU(), w)).BF16s()
	for i, x := range m {
		assert.Equal(t, tensor.BF16FromFloat32(x), hb[i], "value %d", i)
	}
	require.NoError(t, o.Download())
	assert.Equal(t, []float32{1, 1 + 4.0/256, -2.5, tensor.BF16FromFloat32(1e-3).Float32()}, m)
}

// ExampleOffload: a parameter on a device (here a test backend whose memory is not the host's),
// its optimizer in host memory. The gradient the backward left on the device comes down at
// Collect, AdamW steps on the host masters, and the new weights go up.
func ExampleOffload() {
	dev := hostile.Device()
	w := tensor.Must(tensor.To(dev, tensor.Must(tensor.FromFloat32([]float32{1, 2}, 2))))
	g := tensor.Must(tensor.To(dev, tensor.Must(tensor.FromFloat32([]float32{0.5, -0.5}, 2)))) // a backward's result
	off, err := loop.NewOffload([]loop.Param{{Name: "w", Value: w, Grad: g}})
	if err != nil {
		panic(err)
	}
	hostGrads, _ := loop.NewHostGradients(off.Params())
	adam, _ := loop.NewHostAdamW(off.Params(), 0.9, 0.999, 1e-8, 0)
	grads, opt := off.Gradients(hostGrads), off.Optimizer(adam)

	_ = grads.Collect() // after each micro-batch's backward
	_, _ = grads.Reduce(context.Background(), nil, 1)
	norm, _ := opt.Step(0.1, 0)

	onDevice, _ := tensor.Must(tensor.To(tensor.CPU(), w)).Float32s()
	left, _ := tensor.Must(tensor.To(tensor.CPU(), g)).Float32s()
	down, up := off.Bytes()
	fmt.Printf("norm %.4f, weights %.1f, device gradient %v, %d bytes down, %d up\n", norm, onDevice, left, down, up)
	// Output: norm 0.7071, weights [0.9 2.1], device gradient [0 0], 16 bytes down, 16 up
}
