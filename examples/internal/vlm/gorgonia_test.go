// gorgonia.org/gorgonia switches to its cuDNN bindings under the cuda tag, and Debian's CUDA
// toolkit has no cudnn.h, so this CPU-only cross-check is built without that tag.

//go:build !cuda

package vlm

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"
	gt "gorgonia.org/tensor"
)

// TestGradientsMatchGorgonia rebuilds the forward pass of a one-row, one-block instance with
// gorgonia's symbolic autodiff (an independent implementation of every op and its gradient)
// and compares the loss Σ logits ⊙ R and every parameter gradient with the hand-written kernels.
func TestGradientsMatchGorgonia(t *testing.T) {
	c := Config{ImageSize: 4, PatchSize: 2, Channels: 3, Vocab: 7, Dim: 8, Layers: 1, Heads: 2, MLPDim: 12, MaxLen: 6}
	const l = 5
	m, err := New(c, 21)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(8, 8))
	img, tok := randImages(rng, c, 1), randTokens(rng, c, 1, l)
	px, _ := img.Uint8s()
	ids, _ := tok.Int32s()
	pv := patchVectors64(c, px, 1)
	np, d, v, pl := c.Patches(), c.Dim, c.Vocab, c.patchLen()
	s := np + l
	r := make([]float64, l*v)
	for i := range r {
		r[i] = rng.NormFloat64()
	}

	// the float64 reference (ref_test.go)
	w := weights64(m)
	logits, a := forward(c, &w, pv, ids, 1, l)
	want := 0.0
	for i, x := range logits {
		want += x * r[i]
	}
	grad := zeros64(c)
	backward(c, &w, &grad, a, r)

	// the same model in gorgonia
	g := G.NewGraph()
	sp := specs(c)
	nodes := make([]*G.Node, len(sp))
	for i, p := range w.slots() {
		val := gt.New(gt.WithShape(sp[i].shape...), gt.WithBacking(append([]float64(nil), (*p)...)))
		if len(sp[i].shape) == 1 {
			nodes[i] = G.NewVector(g, gt.Float64, G.WithShape(sp[i].shape...), G.WithName(sp[i].name), G.WithValue(val))
		} else {
			nodes[i] = G.NewMatrix(g, gt.Float64, G.WithShape(sp[i].shape...), G.WithName(sp[i].name), G.WithValue(val))
		}
	}
	n := func(i int) *G.Node { return nodes[i] }
	// slot indices in specs order
	const (
		iPatchW = iota
		iPatchB
		iPatchPos
		iTokEmb
		iTokPos
		iLn1G
		iLn1B
		iWqkv
		iBqkv
		iWo
		iBo
		iLn2G
		iLn2B
		iW1
		iB1
		iW2
		iB2
		iLnfG
		iLnfB
		iHeadW
		iHeadB
	)
	must := G.Must
	cmat := func(vals []float64, rows, cols int) *G.Node {
		return G.NewConstant(gt.New(gt.WithShape(rows, cols), gt.WithBacking(vals)))
	}
	scal := func(x float64) *G.Node { return G.NewConstant(x) }
	ln := func(x, gain, bias *G.Node) *G.Node {
		mean := must(G.Mean(x, 1))
		xc := must(G.BroadcastSub(x, mean, nil, []byte{1}))
		vr := must(G.Mean(must(G.Square(xc)), 1))
		sd := must(G.Sqrt(must(G.Add(vr, scal(lnEps)))))
		xh := must(G.BroadcastHadamardDiv(xc, sd, nil, []byte{1}))
		return must(G.BroadcastAdd(must(G.BroadcastHadamardProd(xh, gain, nil, []byte{0})), bias, nil, []byte{0}))
	}
	lin := func(x, wn, bn *G.Node) *G.Node { // weights [out, in]
		return must(G.BroadcastAdd(must(G.Mul(x, must(G.Transpose(wn)))), bn, nil, []byte{0}))
	}
	// embeddings
	ximg := must(G.Add(lin(cmat(pv, np, pl), n(iPatchW), n(iPatchB)), n(iPatchPos)))
	onehot := make([]float64, l*v)
	for t, id := range ids {
		onehot[t*v+int(id)] = 1
	}
	xtxt := must(G.Add(must(G.Mul(cmat(onehot, l, v), n(iTokEmb))), must(G.Slice(n(iTokPos), G.S(0, l)))))
	x := must(G.Concat(0, ximg, xtxt))
	// block
	h := ln(x, n(iLn1G), n(iLn1B))
	qkv := lin(h, n(iWqkv), n(iBqkv))
	mask := make([]float64, s*s)
	for i := range s {
		for j := range s {
			if j >= keyLimit(i, np) {
				mask[i*s+j] = -1e30
			}
		}
	}
	dh := d / c.Heads
	var heads []*G.Node
	for hd := range c.Heads {
		q := must(G.Slice(qkv, nil, G.S(hd*dh, (hd+1)*dh)))
		k := must(G.Slice(qkv, nil, G.S(d+hd*dh, d+(hd+1)*dh)))
		vv := must(G.Slice(qkv, nil, G.S(2*d+hd*dh, 2*d+(hd+1)*dh)))
		sc := must(G.Add(must(G.Mul(must(G.Mul(q, must(G.Transpose(k)))), scal(1/math.Sqrt(float64(dh))))), cmat(mask, s, s)))
		heads = append(heads, must(G.Mul(must(G.SoftMax(sc)), vv)))
	}
	x = must(G.Add(x, lin(must(G.Concat(1, heads...)), n(iWo), n(iBo))))
	u := lin(ln(x, n(iLn2G), n(iLn2B)), n(iW1), n(iB1))
	act := must(G.HadamardProd(u, must(G.Sigmoid(must(G.Mul(u, scal(geluK)))))))
	x = must(G.Add(x, lin(act, n(iW2), n(iB2))))
	// head on the text rows
	xt := must(G.Slice(x, G.S(np, s)))
	lg := lin(ln(xt, n(iLnfG), n(iLnfB)), n(iHeadW), n(iHeadB))
	loss := must(G.Sum(must(G.HadamardProd(lg, cmat(r, l, v)))))
	_, err = G.Grad(loss, nodes...)
	require.NoError(t, err)
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	require.NoError(t, vm.RunAll())

	got := loss.Value().Data().(float64)
	require.InDelta(t, want, got, 1e-9*(1+math.Abs(want)), "loss")
	gs := grad.slots()
	for i, nd := range nodes {
		gv, err := nd.Grad()
		require.NoError(t, err, sp[i].name)
		ag := gv.Data().([]float64)
		require.Len(t, ag, len(*gs[i]), sp[i].name)
		for j, x := range *gs[i] {
			require.InDelta(t, ag[j], x, 1e-8*(1+math.Abs(ag[j])), "%s[%d]", sp[i].name, j)
		}
	}
}
