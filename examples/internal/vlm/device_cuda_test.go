//go:build cuda

package vlm

import (
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
// the device (DeviceParams) is what Params, Generate and UseOps(nil) then see on the host; a
// change written through Params is what the next device Forward uses; ZeroGrad clears both
// copies.
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
	// Generation reads the host copy: the device change included (greedy, so exact tokens).
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
	transfers(2, 1)
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
