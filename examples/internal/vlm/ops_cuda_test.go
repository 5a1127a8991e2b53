//go:build cuda

package vlm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/tensor"
)

// Per-layer checks of CUDAOps against HostOps (the pure-Go reference) on the device; under
// scripts/cuda-emu, on the CPU emulation of the driver. Tolerances:
//
//   - bitwise: LayerNorm forward and backward, bias and column sums, the embeddings and their
//     gradients, the text-row gather/scatter, and the attention backward given the same
//     probabilities. These kernels run the reference's float32 operations in its order (one
//     thread per output where the reference loops), compiled with -fmad=false.
//   - GEMM: host and device each within the forward-error bound of a recursive dot product,
//     |ĉ - c| ≤ (k+2)·u·(Σ_p |a_ip·b_pj| + |beta·c_ij|) with u = 2⁻²⁴, of the float64 product
//     (Higham, Accuracy and Stability of Numerical Algorithms, §3.1): the host's AVX2 kernel
//     sums with fused multiply-adds in 256-wide panels, the device's tile kernel with separate
//     roundings, so the two differ in order and only the bound is common to both.
//   - GELU and the attention forward use the device's expf (≤ 2 ulp) where the host has its
//     polynomial exp (≈ 1 ulp): GELU within 16 ulp of |a| (the exp error, through 1/(1+e) and
//     one product); its backward within 2⁻¹⁹·|da|·(1 + 1.702|u|) (σ + 1.702u·σ·(1-σ) loses
//     relative accuracy in 1-σ as σ → 1, so the error is a few ulp of 1 times 1.702|u|);
//     attention probabilities within 16 ulp of p plus 2⁻²⁴, outputs within (16+S)·u·max|v|
//     (each p_j off by ≤ 16 ulp, then S rounded additions on slightly different values).

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

func TestCUDAGemm(t *testing.T) {
	p := newPair(t, layerConfig())
	for _, s := range []struct {
		m, n, k int
		ta, tb  bool
		beta    float32
	}{{37, 19, 45, false, false, 0}, {16, 32, 16, true, false, 1}, {5, 33, 70, false, true, 1}, {21, 7, 3, true, true, 0.5}, {3, 4, 0, false, false, 1}} {
		t.Run(fmt.Sprintf("%dx%dx%d_%v%v_%v", s.m, s.n, s.k, s.ta, s.tb, s.beta), func(t *testing.T) {
			ah, ad := p.rand(s.m*s.k, 1)
			bh, bd := p.rand(s.k*s.n, 1)
			ch, cd := p.rand(s.m*s.n, 1)
			c0, _ := ch.Float32s()
			c0 = append([]float32(nil), c0...)
			must(t, p.host.Gemm(ch, s.ta, s.tb, s.m, s.n, s.k, ah, bh, s.beta))
			must(t, p.dev.Gemm(cd, s.ta, s.tb, s.m, s.n, s.k, ad, bd, s.beta))
			a, _ := ah.Float32s()
			b, _ := bh.Float32s()
			hc, _ := ch.Float32s()
			dc := download(t, cd)
			const u = 1.0 / (1 << 24)
			for i := range s.m {
				for j := range s.n {
					var ref, mag float64
					for q := range s.k {
						av := a[i*s.k+q]
						if s.ta {
							av = a[q*s.m+i]
						}
						bv := b[q*s.n+j]
						if s.tb {
							bv = b[j*s.k+q]
						}
						ref += float64(av) * float64(bv)
						mag += math.Abs(float64(av) * float64(bv))
					}
					ref += float64(s.beta) * float64(c0[i*s.n+j])
					mag += math.Abs(float64(s.beta) * float64(c0[i*s.n+j]))
					tol := float64(s.k+2) * u * mag
					for _, got := range []struct {
						who string
						v   float32
					}{{"host", hc[i*s.n+j]}, {"device", dc[i*s.n+j]}} {
						if math.Abs(float64(got.v)-ref) > tol {
							t.Fatalf("[%d,%d] %s %v, float64 %v, bound %g", i, j, got.who, got.v, ref, tol)
						}
					}
				}
			}
		})
	}
}

func TestCUDALayerNorm(t *testing.T) {
	p := newPair(t, layerConfig())
	n, d := 29, 16
	xh, xd := p.rand(n*d, 2)
	gh, gd := p.rand(d, 1)
	bh, bd := p.rand(d, 1)
	hh, hd := p.zeros(n * d)
	xhh, xhd := p.zeros(n * d)
	rh, rd := p.zeros(n)
	must(t, p.host.LayerNorm(hh, xhh, rh, n, d, xh, gh, bh))
	must(t, p.dev.LayerNorm(hd, xhd, rd, n, d, xd, gd, bd))
	bitwise(t, "LayerNorm", hh, hd, xhh, xhd, rh, rd)

	dhh, dhd := p.rand(n*d, 1)
	dxh, dxd := p.rand(n*d, 1) // accumulated into
	dgh, dgd := p.rand(d, 1)
	dbh, dbd := p.rand(d, 1)
	must(t, p.host.LayerNormBack(dxh, dgh, dbh, n, d, dhh, xhh, rh, gh))
	must(t, p.dev.LayerNormBack(dxd, dgd, dbd, n, d, dhd, xhd, rd, gd))
	bitwise(t, "LayerNormBack", dxh, dxd, dgh, dgd, dbh, dbd)
}

func TestCUDABiasGELU(t *testing.T) {
	p := newPair(t, layerConfig())
	n, d := 23, 36
	yh, yd := p.rand(n*d, 3)
	bh, bd := p.rand(d, 1)
	must(t, p.host.AddBias(yh, n, d, bh))
	must(t, p.dev.AddBias(yd, n, d, bd))
	bitwise(t, "AddBias", yh, yd)
	dbh, dbd := p.rand(d, 1)
	must(t, p.host.ColSum(dbh, n, d, yh))
	must(t, p.dev.ColSum(dbd, n, d, yd))
	bitwise(t, "ColSum", dbh, dbd)

	ah, ad := p.zeros(n * d)
	must(t, p.host.GELU(ah, n*d, yh))
	must(t, p.dev.GELU(ad, n*d, yd))
	const u = 1.0 / (1 << 24)
	hv, _ := ah.Float32s()
	dv := download(t, ad)
	for i := range hv {
		if math.Abs(float64(hv[i]-dv[i])) > 16*u*math.Abs(float64(hv[i])) {
			t.Fatalf("GELU [%d]: device %v, host %v, beyond 16 ulp", i, dv[i], hv[i])
		}
	}
	dah, dad := p.rand(n*d, 1)
	da0, _ := dah.Float32s()
	da0 = append([]float32(nil), da0...)
	must(t, p.host.GELUBack(dah, n*d, yh))
	must(t, p.dev.GELUBack(dad, n*d, yd))
	hv, _ = dah.Float32s()
	dv = download(t, dad)
	uv, _ := yh.Float32s()
	for i := range hv {
		tol := math.Ldexp(1, -19) * math.Abs(float64(da0[i])) * (1 + 1.702*math.Abs(float64(uv[i])))
		if math.Abs(float64(hv[i]-dv[i])) > tol {
			t.Fatalf("GELUBack [%d]: device %v, host %v, tolerance %g", i, dv[i], hv[i], tol)
		}
	}
}

func TestCUDAAttention(t *testing.T) {
	c := layerConfig()
	p := newPair(t, c)
	b, l := 2, 5
	s := c.Patches() + l
	n := b * s
	qh, qd := p.rand(n*3*c.Dim, 1.5)
	aoh, aod := p.rand(n*c.Dim, 1) // overwritten
	ph, pd := p.rand(b*c.Heads*s*s, 1)
	must(t, p.host.Attention(aoh, ph, b, s, qh))
	must(t, p.dev.Attention(aod, pd, b, s, qd))
	const u = 1.0 / (1 << 24)
	qv, _ := qh.Float32s()
	var vmax float64
	for r := range n {
		for k := 2 * c.Dim; k < 3*c.Dim; k++ {
			vmax = max(vmax, math.Abs(float64(qv[r*3*c.Dim+k])))
		}
	}
	hp, _ := ph.Float32s()
	dp := download(t, pd)
	for i := range hp {
		if math.Abs(float64(hp[i]-dp[i])) > 16*u*float64(hp[i])+u {
			t.Fatalf("attention p [%d]: device %v, host %v", i, dp[i], hp[i])
		}
	}
	ho, _ := aoh.Float32s()
	do := download(t, aod)
	for i := range ho {
		if math.Abs(float64(ho[i]-do[i])) > float64(16+s)*u*vmax {
			t.Fatalf("attention out [%d]: device %v, host %v", i, do[i], ho[i])
		}
	}

	// The backward from the same probabilities (the host's, uploaded): bitwise.
	_, pd2 := p.both(hp)
	daoh, daod := p.rand(n*c.Dim, 1)
	dqh, dqd := p.rand(n*3*c.Dim, 1) // overwritten
	must(t, p.host.AttentionBack(dqh, b, s, qh, ph, daoh))
	must(t, p.dev.AttentionBack(dqd, b, s, qd, pd2, daod))
	bitwise(t, "AttentionBack", dqh, dqd)
}

func TestCUDAEmbeddingsAndHead(t *testing.T) {
	c := layerConfig()
	p := newPair(t, c)
	b, l := 3, 6
	np, d := c.Patches(), c.Dim
	s := np + l
	xh, xd := p.rand(b*s*d, 1) // every row overwritten
	eh, ed := p.rand(b*np*d, 1)
	pbh, pbd := p.rand(d, 1)
	pph, ppd := p.rand(np*d, 1)
	must(t, p.host.PatchEmbed(xh, b, s, eh, pbh, pph))
	must(t, p.dev.PatchEmbed(xd, b, s, ed, pbd, ppd))
	th, td := p.tokens(b * l)
	embh, embd := p.rand(c.Vocab*d, 1)
	tph, tpd := p.rand(c.MaxLen*d, 1)
	must(t, p.host.TokenEmbed(xh, b, l, s, th, embh, tph))
	must(t, p.dev.TokenEmbed(xd, b, l, s, td, embd, tpd))
	bitwise(t, "PatchEmbed+TokenEmbed", xh, xd)

	xth, xtd := p.rand(b*l*d, 1)
	must(t, p.host.TextRows(xth, b, l, s, xh))
	must(t, p.dev.TextRows(xtd, b, l, s, xd))
	bitwise(t, "TextRows", xth, xtd)
	dxh, dxd := p.rand(b*s*d, 1)
	must(t, p.host.TextRowsBack(dxh, b, l, s, xth))
	must(t, p.dev.TextRowsBack(dxd, b, l, s, xtd))
	bitwise(t, "TextRowsBack", dxh, dxd)

	dxh, dxd = p.rand(b*s*d, 1)
	dih, did := p.rand(b*np*d, 1)
	dph, dpd := p.rand(np*d, 1)
	must(t, p.host.PatchEmbedBack(dih, dph, b, s, dxh))
	must(t, p.dev.PatchEmbedBack(did, dpd, b, s, dxd))
	deh, ded := p.rand(c.Vocab*d, 1)
	dth, dtd := p.rand(c.MaxLen*d, 1)
	must(t, p.host.TokenEmbedBack(deh, dth, b, l, s, dxh, th))
	must(t, p.dev.TokenEmbedBack(ded, dtd, b, l, s, dxd, td))
	bitwise(t, "embedding gradients", dih, did, dph, dpd, deh, ded, dth, dtd)
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
	lg64, a := forward(c, &w, patchVectors[float64](c, px, b), ids, b, l)
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

// TestCUDAAttentionMass: the device adds the host's float64 bits (one thread per row runs the
// reference's loops; only additions and divisions of doubles, which are IEEE on both), over
// two blocks of different groups accumulating into nonzero sums, with an empty response.
func TestCUDAAttentionMass(t *testing.T) {
	c := layerConfig()
	p := newPair(t, c)
	b, l, groups := 3, 6, 3
	s := c.Patches() + l
	spans := []int32{1, 6, 4, 2, 2, 0}
	sh := tensor.Must(tensor.FromInt32(append([]int32(nil), spans...), len(spans)))
	sd, err := tensor.To(p.dev.Backend(), sh)
	must(t, err)
	w := 2 + 2*groups
	init := make([]int32, 2*b*w)
	for i := 0; i < len(init); i += 2 {
		u := math.Float64bits(p.rng.Float64())
		init[i], init[i+1] = int32(uint32(u)), int32(uint32(u>>32))
	}
	ah := tensor.Must(tensor.FromInt32(append([]int32(nil), init...), len(init)))
	ad, err := tensor.To(p.dev.Backend(), ah)
	must(t, err)
	for _, g := range []int{0, 2} {
		ph, pd := p.rand(b*c.Heads*s*s, 0.3)
		must(t, p.host.AttentionMass(ah, b, s, g, groups, ph, sh))
		must(t, p.dev.AttentionMass(ad, b, s, g, groups, pd, sd))
	}
	hv, _ := ah.Int32s()
	dh, err := tensor.To(tensor.CPU(), ad)
	must(t, err)
	dv, _ := dh.Int32s()
	changed := 0
	for i := range hv {
		if hv[i] != dv[i] {
			t.Fatalf("acc word %d: device %#x, host %#x (bitwise expected)", i, dv[i], hv[i])
		}
		if hv[i] != init[i] {
			changed++
		}
	}
	if changed == 0 {
		t.Fatal("no sum changed")
	}
	_, pz := p.zeros(b * c.Heads * s * s)
	if err := p.dev.AttentionMass(ad, b, s, 3, groups, pz, sd); err == nil {
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
	// term is a mass per key within the masses' 1e-5 above; the sums themselves add the
	// host's bits, TestCUDAAttentionMass).
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
