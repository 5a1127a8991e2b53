//go:build cuda

package vlm

import (
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/tensor"
)

// Checks of the model on CUDAOps (the SDK's CUDA ops for the layers, package kernels for the
// sum, the sampler and the optimizer) on the device; under scripts/cuda-emu, on the CPU
// emulation of the driver. The SDK's ops are checked op by op in package cuda; here the whole
// model is held to the float64 reference (ref_test.go) at the host's float32 tolerances, and
// the kept kernels to the host's bits.

func device(t testing.TB) *cuda.Backend {
	t.Helper()
	b, err := cuda.New(0)
	if err != nil {
		if os.Getenv("MTRL_REQUIRE_CUDA") == "1" {
			t.Fatalf("MTRL_REQUIRE_CUDA=1 and cuda.New(0): %v", err)
		}
		t.Skipf("SKIP: no CUDA device: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// opsPair is a device op set and a host one, with helpers to make the same tensor on both.
type opsPair struct {
	t    *testing.T
	c    Config
	dev  *CUDAOps
	host HostOps
	rng  *rand.Rand
}

func newPair(t *testing.T, c Config) *opsPair {
	b := device(t)
	o, err := NewCUDAOps(c, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = o.Close() })
	return &opsPair{t: t, c: c, dev: o, host: HostOps{Config: c}, rng: rand.New(rand.NewPCG(7, 11))}
}

// rand returns n normal values (scaled) as a host tensor and its device copy.
func (p *opsPair) rand(n int, scale float64) (*tensor.Tensor, *tensor.Tensor) {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(p.rng.NormFloat64() * scale)
	}
	return p.both(v)
}

func (p *opsPair) both(v []float32) (*tensor.Tensor, *tensor.Tensor) {
	h := tensor.Must(tensor.FromFloat32(append([]float32(nil), v...), len(v)))
	d, err := tensor.To(p.dev.Backend(), h)
	if err != nil {
		p.t.Fatal(err)
	}
	h = tensor.Must(tensor.FromFloat32(append([]float32(nil), v...), len(v)))
	return h, d
}

func (p *opsPair) zeros(n int) (*tensor.Tensor, *tensor.Tensor) { return p.both(make([]float32, n)) }

func (p *opsPair) tokens(n int) (*tensor.Tensor, *tensor.Tensor) {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(p.rng.IntN(p.c.Vocab))
	}
	h := tensor.Must(tensor.FromInt32(ids, n))
	d, err := tensor.To(p.dev.Backend(), h)
	if err != nil {
		p.t.Fatal(err)
	}
	return h, d
}

func download(t *testing.T, d *tensor.Tensor) []float32 {
	t.Helper()
	h, err := tensor.To(tensor.CPU(), d)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := h.Float32s()
	return v
}

// bitwise compares the host and device results of each named pair bit for bit.
func bitwise(t *testing.T, what string, pairs ...*tensor.Tensor) {
	t.Helper()
	for i := 0; i < len(pairs); i += 2 {
		h, _ := pairs[i].Float32s()
		d := download(t, pairs[i+1])
		for j := range h {
			if math.Float32bits(h[j]) != math.Float32bits(d[j]) {
				t.Fatalf("%s output %d [%d]: device %v, host %v (bitwise expected)", what, i/2, j, d[j], h[j])
			}
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// layerConfig is small but has every feature: several patches, heads, a vocabulary and an
// MLP width that are not multiples of the GEMM tile.
func layerConfig() Config {
	return Config{ImageSize: 8, PatchSize: 4, Channels: 3, Vocab: 23, Dim: 16, Layers: 1, Heads: 2, MLPDim: 36, MaxLen: 8}
}

// TestCUDAAdd: the device's elementwise sum gives the host's bits (one float32 addition per
// value), and only the first n values change.
func TestCUDAAdd(t *testing.T) {
	p := newPair(t, layerConfig())
	ah, ad := p.rand(1000, 1)
	xh, xd := p.rand(1000, 1)
	must(t, p.host.Add(ah, xh, 999))
	must(t, p.dev.Add(ad, xd, 999))
	bitwise(t, "Add", ah, ad)
	if err := p.dev.Add(ad, xd, 1001); err == nil {
		t.Fatal("Add of 1001 values of 1000-value tensors accepted")
	}
}

// TestCUDAModelGradients is the whole model on the device: logits and every parameter gradient
// of OpsModel on CUDAOps against the float64 kernels (themselves checked by finite differences
// in TestGradientsFiniteDifferences), to the tolerance the host's float32 model is held to in
// TestFloat32MatchesFloat64 (logits 1e-4·(1+|x|), gradients 1e-3·(1+|g|)); then a directional
// finite difference of the device's own forward, L(w ± εv) with v the device gradient, which
// must agree with |g|² to 2% (float32 logits, ε = 1e-2: the truncation and rounding errors
// of the central difference are both below 1% at this size).
func TestCUDAModelGradients(t *testing.T) {
	c := Config{ImageSize: 8, PatchSize: 4, Channels: 3, Vocab: 19, Dim: 16, Layers: 2, Heads: 2, MLPDim: 24, MaxLen: 6}
	p := newPair(t, c)
	m, err := New(c, 9)
	must(t, err)
	om, err := NewOpsModel(m, p.dev)
	must(t, err)
	defer om.Release()
	rng := rand.New(rand.NewPCG(5, 6))
	b, l := 3, 6
	img, tok := randImages(rng, c, b), randTokens(rng, c, b, l)
	logits, act, err := om.Forward(img, tok)
	must(t, err)
	defer act.Release()
	r := make([]float32, b*l*c.Vocab)
	r64 := make([]float64, len(r))
	for i := range r {
		r[i] = float32(rng.NormFloat64())
		r64[i] = float64(r[i])
	}
	dl, err := tensor.To(p.dev.Backend(), tensor.Must(tensor.FromFloat32(r, b, l, c.Vocab)))
	must(t, err)
	must(t, om.Backward(act, dl))

	px, _ := img.Uint8s()
	ids, _ := tok.Int32s()
	w := weights64(m)
	lg64, a := forward(c, &w, patchVectors64(c, px, b), ids, b, l)
	lg := download(t, logits)
	for i := range lg64 {
		if math.Abs(lg64[i]-float64(lg[i])) > 1e-4*(1+math.Abs(lg64[i])) {
			t.Fatalf("logit %d: device %v, float64 %v", i, lg[i], lg64[i])
		}
	}
	g := zeros64(c)
	backward(c, &w, &g, a, r64)
	var gg float64
	grads := make([][]float32, len(om.Params()))
	for i, prm := range om.Params() {
		gd := download(t, prm.G)
		grads[i] = gd
		for j, v := range *g.slots()[i] {
			if math.Abs(v-float64(gd[j])) > 1e-3*(1+math.Abs(v)) {
				t.Fatalf("%s[%d]: device %v, float64 %v", prm.Name, j, gd[j], v)
			}
			gg += float64(gd[j]) * float64(gd[j])
		}
	}

	// Directional finite difference on the device: move every weight by ±ε·g/|g|.
	const eps = 1e-2
	norm := math.Sqrt(gg)
	loss := func(sign float64) float64 {
		for i, prm := range m.Params() {
			w0, _ := prm.W.Float32s()
			v := make([]float32, len(w0))
			for j := range v {
				v[j] = w0[j] + float32(sign*eps*float64(grads[i][j])/norm)
			}
			must(t, tensor.CopyInto(om.Params()[i].W, tensor.Must(tensor.FromFloat32(v, prm.W.Shape()...))))
		}
		lgt, ac, err := om.Forward(img, tok)
		must(t, err)
		ac.Release()
		var s float64
		for i, x := range download(t, lgt) {
			s += float64(x) * r64[i]
		}
		_ = lgt.Release()
		return s
	}
	fd := (loss(1) - loss(-1)) / (2 * eps)
	if math.Abs(fd-norm) > 0.02*norm {
		t.Fatalf("directional derivative: finite difference %v, analytic |g| = %v", fd, norm)
	}
	t.Logf("directional derivative: finite difference %.6g, analytic %.6g", fd, norm)
}

// TestCUDALSEMass: the device's response-attention sums from log-sum-exps equal the host's
// (attentionMass, the same float64 loop in the same order) to 1e-14 relative — exp and expm1 in
// double may differ by an ulp between the device's libm and Go's — over two blocks of different
// groups accumulating into nonzero sums, with an empty response; a group outside [0, groups) is
// refused.
func TestCUDALSEMass(t *testing.T) {
	c := layerConfig()
	p := newPair(t, c)
	b, l, groups := 3, 6, 3
	spans := []int32{1, 6, 4, 2, 2, 0}
	sd, err := tensor.To(p.dev.Backend(), tensor.Must(tensor.FromInt32(append([]int32(nil), spans...), len(spans))))
	must(t, err)
	w := 2 + 2*groups
	want := make([]float64, b*w)
	init := make([]int32, 2*b*w)
	for i := range want {
		want[i] = p.rng.Float64()
		u := math.Float64bits(want[i])
		init[2*i], init[2*i+1] = int32(uint32(u)), int32(uint32(u>>32))
	}
	ad, err := tensor.To(p.dev.Backend(), tensor.Must(tensor.FromInt32(init, len(init))))
	must(t, err)
	for _, g := range []int{0, 2} {
		// lse over all keys ≥ lse over the image keys, as in a real pass
		img, extra := make([]float32, b*l*c.Heads), make([]float32, b*l*c.Heads)
		all := make([]float32, len(img))
		for i := range img {
			img[i] = float32(p.rng.NormFloat64() * 3)
			extra[i] = float32(p.rng.NormFloat64() * 3)
			all[i] = float32(math.Log(math.Exp(float64(img[i])) + math.Exp(float64(extra[i]))))
		}
		_, imgd := p.both(img)
		_, alld := p.both(all)
		attentionMass(c, l, g, groups, [2][]float32{all, img}, spans, want)
		must(t, p.dev.LSEMass(ad, alld, imgd, sd, b, l, g, groups))
	}
	h, err := tensor.To(tensor.CPU(), ad)
	must(t, err)
	bits, _ := h.Int32s()
	for i, x := range want {
		got := math.Float64frombits(uint64(uint32(bits[2*i])) | uint64(uint32(bits[2*i+1]))<<32)
		if math.Abs(got-x) > 1e-14*math.Abs(x) {
			t.Fatalf("acc %d: device %v, host %v", i, got, x)
		}
	}
	_, z := p.zeros(b * l * c.Heads)
	if err := p.dev.LSEMass(ad, z, z, sd, b, l, 3, groups); err == nil {
		t.Fatal("group 3 of 3 accepted")
	}
}

// TestCUDAUseOps: Model.Forward and Backward through UseOps(CUDAOps) agree with the host model
// within twice the float32-vs-float64 tolerances (each side is within them of float64), and
// the attention statistics read the device record.
func TestCUDAUseOps(t *testing.T) {
	c := tinyConfig()
	p := newPair(t, c)
	host, err := New(c, 4)
	must(t, err)
	dev, err := New(c, 4)
	must(t, err)
	must(t, dev.UseOps(p.dev))
	defer dev.UseOps(nil)
	rng := rand.New(rand.NewPCG(8, 9))
	b, l := 2, 5
	img, tok := randImages(rng, c, b), randTokens(rng, c, b, l)
	hl, ha, err := host.Forward(img, tok)
	must(t, err)
	dlg, da, err := dev.Forward(img, tok)
	must(t, err)
	defer da.Release()
	hv, _ := hl.Float32s()
	dv, _ := dlg.Float32s()
	for i := range hv {
		if math.Abs(float64(hv[i]-dv[i])) > 2e-4*(1+math.Abs(float64(hv[i]))) {
			t.Fatalf("logit %d: device %v, host %v", i, dv[i], hv[i])
		}
	}
	r := make([]float32, len(hv))
	for i := range r {
		r[i] = float32(rng.NormFloat64())
	}
	dl := tensor.Must(tensor.FromFloat32(r, b, l, c.Vocab))
	for range 2 { // accumulates
		must(t, host.Backward(ha, dl))
		must(t, dev.Backward(da, dl))
	}
	for i, prm := range host.Params() {
		hg, _ := prm.G.Float32s()
		dg, _ := dev.Params()[i].G.Float32s()
		for j := range hg {
			if math.Abs(float64(hg[j]-dg[j])) > 2e-3*(1+math.Abs(float64(hg[j]))) {
				t.Fatalf("%s[%d]: device %v, host %v", prm.Name, j, dg[j], hg[j])
			}
		}
	}
	hi, ht, _, _ := ha.Attention(1, 1, 2)
	di, dt, _, _ := da.Attention(1, 1, 2)
	if math.Abs(hi-di) > 1e-5 || math.Abs(ht-dt) > 1e-5 {
		t.Fatalf("attention split: device %v/%v, host %v/%v", di, dt, hi, ht)
	}
	// The response sums run on the device: within 1e-5 per summed term of the host's (each
	// term is a mass per key within the masses' 1e-5 above; the sums themselves are the
	// host's to 1e-14, TestCUDALSEMass).
	plen, n := []int{2, 1}, []int{3, 4}
	hs, err := ha.ResponseAttention(plen, n, 2)
	must(t, err)
	ds, err := da.ResponseAttention(plen, n, 2)
	must(t, err)
	for r := range hs {
		terms := float64(c.Layers * n[r])
		if math.Abs(hs[r].Text-ds[r].Text) > 1e-5*terms || math.Abs(hs[r].Vision-ds[r].Vision) > 1e-5*terms {
			t.Fatalf("row %d response attention: device %+v, host %+v", r, ds[r], hs[r])
		}
	}
}

// bitsSource is a rand.Source returning fixed bits: the host sampler then draws the device's
// uniform.
type bitsSource uint64

func (s bitsSource) Uint64() uint64 { return uint64(s) }

// TestCUDASample: the device sampler picks the host sampler's token for every row, given the
// same uniforms (SampleBits), over greedy, plain, top-p, top-k and both, with ties in the
// logits (the stable order matters) and several temperatures.
func TestCUDASample(t *testing.T) {
	c := layerConfig()
	p := newPair(t, c)
	rows, v := 64, c.Vocab
	lg := make([]float32, rows*v)
	for i := range lg {
		lg[i] = float32(p.rng.NormFloat64() * 2)
		if i%7 == 3 {
			lg[i] = lg[i-1] // ties
		}
	}
	_, ld := p.both(lg)
	out, err := tensor.New(p.dev.Backend(), tensor.Int32, rows)
	must(t, err)
	probs, order := make([]float64, v), make([]int, v)
	for _, cs := range []struct {
		temp, topP float64
		topK       int
	}{{0, 1, 0}, {1, 1, 0}, {0.7, 1, 0}, {1, 0.9, 0}, {1.3, 0.5, 0}, {1, 1, 5}, {0.8, 0.8, 7}} {
		for step := range 3 {
			const seed = 12345
			must(t, p.dev.Sample(out, ld, rows, cs.temp, cs.topP, cs.topK, seed, step))
			h, err := tensor.To(tensor.CPU(), out)
			must(t, err)
			got, _ := h.Int32s()
			for r := range rows {
				rng := rand.New(bitsSource(SampleBits(seed, uint64(r), uint64(step))))
				want := sample(lg[r*v:(r+1)*v], cs.temp, cs.topP, cs.topK, rng, probs, order)
				if got[r] != want {
					t.Fatalf("%+v step %d row %d: device %d, host %d", cs, step, r, got[r], want)
				}
			}
		}
	}
}

// TestCUDAOptimizer: AdamW on the device gives the bits of the trainer's update (reproduced
// here from adamw.go's formula: m, v, the float64 square root, the decayed weight), the
// gradient norm agrees with a float64 sum in index order to 1e-12 relative (both are float64
// sums of the same float32 squares, only the order differs: n·2⁻⁵³ at most), clipping scales
// as ClipGradNorm does (bitwise: one float32 product), and a NaN gradient gives a NaN norm.
func TestCUDAOptimizer(t *testing.T) {
	p := newPair(t, layerConfig())
	const n = 1000
	wh, wd := p.rand(n, 1)
	gh, gd := p.rand(n, 0.1)
	mh, md := p.rand(n, 0.01)
	vh, vd := p.both(make([]float32, n))
	vv, _ := vh.Float32s()
	for i := range vv {
		vv[i] = float32(p.rng.Float64() * 1e-3)
	}
	must(t, tensor.CopyInto(vd, vh))
	const lr, wdecay, b1, b2, eps, step = 3e-4, 0.01, 0.9, 0.999, 1e-8, 3
	bc1, bc2 := 1-math.Pow(b1, step), 1-math.Pow(b2, step)
	s := AdamWStep{Beta1: b1, Beta2: b2, StepSize: float32(lr / bc1), InvSqrtBC2: float32(1 / math.Sqrt(bc2)), Eps: eps, Shrink: float32(1 - lr*wdecay)}
	must(t, p.dev.AdamW(wd, gd, md, vd, n, s))
	w, _ := wh.Float32s()
	g, _ := gh.Float32s()
	m, _ := mh.Float32s()
	for j := range w {
		m[j] = s.Beta1*m[j] + (1-s.Beta1)*g[j]
		vv[j] = s.Beta2*vv[j] + (1-s.Beta2)*g[j]*g[j]
		denom := float32(math.Sqrt(float64(vv[j])))*s.InvSqrtBC2 + s.Eps
		w[j] = w[j]*s.Shrink - s.StepSize*m[j]/denom
	}
	bitwise(t, "AdamW", wh, wd, mh, md, vh, vd)

	_, g2d := p.rand(37, 3)
	gs := []*tensor.Tensor{gd, g2d}
	norm, err := p.dev.GradNorm(gs)
	must(t, err)
	var sum float64
	for _, gt := range gs {
		for _, x := range download(t, gt) {
			sum += float64(x) * float64(x)
		}
	}
	if want := math.Sqrt(sum); math.Abs(norm-want) > 1e-12*want {
		t.Fatalf("GradNorm %v, float64 %v", norm, want)
	}
	before := download(t, g2d)
	must(t, p.dev.ClipGrads(gs, norm, norm/2))
	sc := float32(norm / 2 / (norm + 1e-6))
	for i, x := range download(t, g2d) {
		if x != before[i]*sc {
			t.Fatalf("clip [%d]: %v, want %v", i, x, before[i]*sc)
		}
	}
	bad := download(t, g2d)
	bad[5] = float32(math.NaN())
	_, badd := p.both(bad)
	if norm, err := p.dev.GradNorm([]*tensor.Tensor{gd, badd}); err != nil || !math.IsNaN(norm) {
		t.Fatalf("non-finite gradient: norm %v, err %v; want NaN", norm, err)
	}
}
