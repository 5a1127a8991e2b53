//go:build cuda

package vlm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

// TestCUDAGradKernels: Zero, Add and Scale (the trainer's gradient bookkeeping on the device)
// give the host's float32 results bit for bit: one rounding each, no order involved.
func TestCUDAGradKernels(t *testing.T) {
	p := newPair(t, layerConfig())
	const n = 777
	ah, ad := p.rand(n, 1)
	gh, gd := p.rand(n, 3)
	must(t, p.dev.Add(ad, gd, n))
	a, _ := ah.Float32s()
	g, _ := gh.Float32s()
	for i := range a {
		a[i] += g[i]
	}
	bitwise(t, "Add", ah, ad)
	must(t, p.dev.Scale(ad, n, 0.37))
	for i := range a {
		a[i] *= 0.37
	}
	bitwise(t, "Scale", ah, ad)
	must(t, p.dev.Zero(ad, n-1)) // the last value stays
	for i := range n - 1 {
		a[i] = 0
	}
	bitwise(t, "Zero", ah, ad)
}

// TestCUDAResident: after UseOps the weights and gradients live on the device and move only
// when the other side needs them. Forward and Backward transfer no weights; a change made on
// the device (DeviceParams) is what Params and UseOps(nil) then see on the host; a change
// written through Params is what the next device use (Generate, Forward) sees; ZeroGrad clears
// both copies.
func TestCUDAResident(t *testing.T) {
	c := tinyConfig()
	p := newPair(t, c)
	host, err := New(c, 5)
	must(t, err)
	dev, err := New(c, 5)
	must(t, err)
	must(t, dev.UseOps(p.dev))
	defer dev.UseOps(nil)
	transfers := func(wantUp, wantDown int) {
		t.Helper()
		if up, down := dev.Transfers(); up != wantUp || down != wantDown {
			t.Fatalf("transfers: %d uploads, %d downloads; want %d, %d", up, down, wantUp, wantDown)
		}
	}
	transfers(1, 0)
	rng := rand.New(rand.NewPCG(3, 4))
	b, l := 2, 4
	img, tok := randImages(rng, c, b), randTokens(rng, c, b, l)
	logits, act, err := dev.ForwardOnBackend(img, tok)
	must(t, err)
	if logits.IsHost() {
		t.Fatal("ForwardOnBackend returned host logits")
	}
	dl := tensor.Must(tensor.NewLike(logits, tensor.Float32))
	must(t, tensor.CopyInto(dl, logits)) // any gradient will do
	must(t, dev.Backward(act, dl))
	act.Release()
	_ = logits.Release()
	_ = dl.Release()
	transfers(1, 0)

	// A device-side change (what the optimizer does) reaches the host when it reads.
	dps, err := dev.DeviceParams()
	must(t, err)
	head := len(dps) - 2 // head.w
	must(t, p.dev.Scale(dps[head].W, dps[head].W.Len(), 0.5))
	hp := host.Params()
	hw, _ := hp[head].W.Float32s()
	for i := range hw {
		hw[i] *= 0.5
	}
	dw, _ := dev.Params()[head].W.Float32s()
	for i := range hw {
		if dw[i] != hw[i] {
			t.Fatalf("head.w[%d] on the host after the device change: %v, want %v", i, dw[i], hw[i])
		}
	}
	transfers(1, 1)
	// Generation (on the device since UseOps) sees the change too: greedy, the host's tokens.
	prompts := [][]int32{{BOS, 5, 6}, {BOS, 7}}
	gh, err := host.Generate(img, prompts, 4, 0, 1, nil)
	must(t, err)
	gd, err := dev.Generate(img, prompts, 4, 0, 1, nil)
	must(t, err)
	for r := range gh {
		if len(gh[r]) != len(gd[r]) {
			t.Fatalf("row %d: device copy generates %v, host %v", r, gd[r], gh[r])
		}
		for i := range gh[r] {
			if gh[r][i] != gd[r][i] {
				t.Fatalf("row %d: device copy generates %v, host %v", r, gd[r], gh[r])
			}
		}
	}

	// A host-side write (a loaded checkpoint) reaches the device at its next use.
	pb := 1 // patch.b
	hb, _ := host.Params()[pb].W.Float32s()
	db, _ := dev.Params()[pb].W.Float32s()
	for i := range hb {
		hb[i], db[i] = 0.25, 0.25
	}
	hl, _, err := host.Forward(img, tok)
	must(t, err)
	dlg, da, err := dev.Forward(img, tok)
	must(t, err)
	da.Release()
	transfers(3, 1) // Params marked the host copy as written: uploaded by Generate, then by Forward
	hv, _ := hl.Float32s()
	dv, _ := dlg.Float32s()
	for i := range hv {
		if math.Abs(float64(hv[i]-dv[i])) > 2e-4*(1+math.Abs(float64(hv[i]))) {
			t.Fatalf("logit %d after a host write: device %v, host %v", i, dv[i], hv[i])
		}
	}

	// ZeroGrad clears the device's gradients too.
	dev.ZeroGrad()
	for _, prm := range dev.Params() {
		g, _ := prm.G.Float32s()
		for i, v := range g {
			if v != 0 {
				t.Fatalf("%s.G[%d] = %v after ZeroGrad", prm.Name, i, v)
			}
		}
	}

	// UseOps(nil) keeps the newest values: a device change right before it is on the host after.
	dps, err = dev.DeviceParams()
	must(t, err)
	must(t, p.dev.Zero(dps[pb].W, dps[pb].W.Len()))
	must(t, dev.UseOps(nil))
	after, _ := dev.Params()[pb].W.Float32s()
	for i, v := range after {
		if v != 0 {
			t.Fatalf("patch.b[%d] = %v after UseOps(nil), want the device's 0", i, v)
		}
	}
}

// TestCUDAGenerate: KV-cached generation on the device (prefill, decode steps, the device
// sampler fed the host's uniforms) returns the host generator's tokens for the same weights
// and random sources: greedy, temperature, top-p and top-k, prompts of different lengths, rows
// that stop at EOS or at maxNew, per-row and shared random sources. The device's logits differ
// from the host's in the last bits (GEMM order, expf), so a token could flip only if a uniform
// fell within that of a boundary; none does here (a flip would fail the test, not hide).
func TestCUDAGenerate(t *testing.T) {
	c := tinyConfig()
	c.MaxLen = 12 // room for several decode steps
	p := newPair(t, c)
	host, err := New(c, 6)
	must(t, err)
	dev, err := New(c, 6)
	must(t, err)
	must(t, dev.UseOps(p.dev))
	defer dev.UseOps(nil)
	rng := rand.New(rand.NewPCG(1, 2))
	prompts := [][]int32{{BOS, 5, 6, 7}, {BOS, 9}, {BOS, 4, 4}, {BOS, 10, 3, 8}}
	img := randImages(rng, c, len(prompts))
	for _, tc := range []struct {
		temp, topP float64
		topK       int
	}{{0, 1, 0}, {1, 1, 0}, {0.7, 0.9, 0}, {1.3, 1, 5}, {1, 0.8, 7}} {
		src := func() []*rand.Rand {
			rs := make([]*rand.Rand, len(prompts))
			for i := range rs {
				rs[i] = rand.New(rand.NewPCG(uint64(i), 77))
			}
			return rs
		}
		want, err := host.GenerateRows(img, prompts, 9, tc.temp, tc.topP, tc.topK, src())
		must(t, err)
		got, err := dev.GenerateRows(img, prompts, 9, tc.temp, tc.topP, tc.topK, src())
		must(t, err)
		sameTokens(t, fmt.Sprintf("per-row %+v", tc), want, got)
		want, err = host.GenerateTopK(img, prompts, 9, tc.temp, tc.topP, tc.topK, rand.New(rand.NewPCG(5, 5)))
		must(t, err)
		got, err = dev.GenerateTopK(img, prompts, 9, tc.temp, tc.topP, tc.topK, rand.New(rand.NewPCG(5, 5)))
		must(t, err)
		sameTokens(t, fmt.Sprintf("shared %+v", tc), want, got)
	}
	if up, down := dev.Transfers(); up != 1 || down != 0 {
		t.Fatalf("generation moved weights: %d uploads, %d downloads", up, down)
	}
}

func sameTokens(t *testing.T, what string, want, got [][]int32) {
	t.Helper()
	for r := range want {
		if fmt.Sprint(want[r]) != fmt.Sprint(got[r]) {
			t.Fatalf("%s row %d: device %v, host %v", what, r, got[r], want[r])
		}
	}
	t.Logf("%s: %v", what, got)
}
