package vlm

import (
	"math"

	"github.com/mtrl-go/mtrl/tensor"
)

// Ops is the set of layer ops the model is made of, on flat row-major float32 tensors (token
// ids int32) of one backend; destinations come first. Each op's semantics is the pure-Go kernel
// of core.go that HostOps runs; CUDAOps (built with the `cuda` tag) runs the kernels of package
// kernels on a cuda.Backend. Sizes are passed explicitly; every tensor must hold at least the
// elements the sizes imply (an ErrShape otherwise).
type Ops interface {
	Backend() tensor.Backend
	// Gemm: c = op(a)·op(b) + beta·c, op(a) [m, k] (a is [k, m] when ta), op(b) [k, n].
	Gemm(c *tensor.Tensor, ta, tb bool, m, n, k int, a, b *tensor.Tensor, beta float32) error
	// LayerNorm of n rows of width d: h = xhat·g + b, storing xhat and rstd.
	LayerNorm(h, xhat, rstd *tensor.Tensor, n, d int, x, g, b *tensor.Tensor) error
	// LayerNormBack adds the input gradient to dx and accumulates dg, db.
	LayerNormBack(dx, dg, db *tensor.Tensor, n, d int, dh, xhat, rstd, g *tensor.Tensor) error
	// AddBias adds b [d] to every row of y [n, d]; ColSum accumulates dy's column sums into db.
	AddBias(y *tensor.Tensor, n, d int, b *tensor.Tensor) error
	ColSum(db *tensor.Tensor, n, d int, dy *tensor.Tensor) error
	// GELU: a = u·σ(1.702u) over n values; GELUBack turns da into du in place.
	GELU(a *tensor.Tensor, n int, u *tensor.Tensor) error
	GELUBack(da *tensor.Tensor, n int, u *tensor.Tensor) error
	// Attention of b rows of s tokens from qkv [b·s, 3D]: ao [b·s, D], p [b, H, s, s].
	Attention(ao, p *tensor.Tensor, b, s int, qkv *tensor.Tensor) error
	// AttentionBack overwrites dqkv [b·s, 3D] from dao [b·s, D].
	AttentionBack(dqkv *tensor.Tensor, b, s int, qkv, p, dao *tensor.Tensor) error
	// PatchEmbed writes x's image rows from the projected patches e [b·NP, D]; TokenEmbed its
	// text rows from tokens [b, l].
	PatchEmbed(x *tensor.Tensor, b, s int, e, pb, pos *tensor.Tensor) error
	TokenEmbed(x *tensor.Tensor, b, l, s int, tokens, emb, pos *tensor.Tensor) error
	// PatchEmbedBack gathers dx's image rows into dimg and adds them to dpos; TokenEmbedBack
	// adds dx's text rows to demb and dpos.
	PatchEmbedBack(dimg, dpos *tensor.Tensor, b, s int, dx *tensor.Tensor) error
	TokenEmbedBack(demb, dpos *tensor.Tensor, b, l, s int, dx, tokens *tensor.Tensor) error
	// TextRows copies x [b, s, D]'s text rows to xt [b, l, D]; TextRowsBack writes dx from dxt
	// (zero image rows).
	TextRows(xt *tensor.Tensor, b, l, s int, x *tensor.Tensor) error
	TextRowsBack(dx *tensor.Tensor, b, l, s int, dxt *tensor.Tensor) error
	// AttentionMass adds one block's response attention, from its probabilities p [b, H, s, s],
	// to acc [b, 2+2·groups] float64 (stored as an int32 tensor of twice the length, each value
	// little-endian low word first): per row, span [b, 2] int32 gives the prompt length (BOS
	// included) and the response length, and the block's layer group (see attentionMass). The
	// spans are trusted to fit s (Activations.ResponseAttention checks them on the host).
	AttentionMass(acc *tensor.Tensor, b, s, group, groups int, p, span *tensor.Tensor) error
}

// HostOps is the op set on CPU tensors: the pure-Go kernels the model's Forward and Backward
// run (the reference of every other op set).
type HostOps struct{ Config Config }

var _ Ops = HostOps{}

// Backend returns tensor.CPU().
func (HostOps) Backend() tensor.Backend { return tensor.CPU() }

// f32 returns the host values of t, at least n of them.
func f32(op, arg string, t *tensor.Tensor, n int) ([]float32, error) {
	if t == nil {
		return nil, tensor.Errorf(tensor.ErrShape, op, arg, "is nil")
	}
	v, err := t.Float32s()
	if err != nil {
		return nil, err
	}
	if len(v) < n {
		return nil, tensor.Errorf(tensor.ErrShape, op, arg, "has %d elements, needs %d", len(v), n)
	}
	return v[:n], nil
}

// i32 is f32 for an int32 tensor.
func i32(op, arg string, t *tensor.Tensor, n int) ([]int32, error) {
	if t == nil {
		return nil, tensor.Errorf(tensor.ErrShape, op, arg, "is nil")
	}
	v, err := t.Int32s()
	if err != nil {
		return nil, err
	}
	if len(v) < n {
		return nil, tensor.Errorf(tensor.ErrShape, op, arg, "has %d elements, needs %d", len(v), n)
	}
	return v[:n], nil
}

// hostArgs resolves several tensors with their required lengths.
func hostArgs(op string, names []string, ts []*tensor.Tensor, ns []int) ([][]float32, error) {
	out := make([][]float32, len(ts))
	for i, t := range ts {
		v, err := f32(op, names[i], t, ns[i])
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (o HostOps) Gemm(c *tensor.Tensor, ta, tb bool, m, n, k int, a, b *tensor.Tensor, beta float32) error {
	v, err := hostArgs("vlm.HostOps.Gemm", []string{"c", "a", "b"}, []*tensor.Tensor{c, a, b}, []int{m * n, m * k, k * n})
	if err != nil {
		return err
	}
	gemm(ta, tb, m, n, k, v[1], v[2], beta, v[0])
	return nil
}

func (o HostOps) LayerNorm(h, xhat, rstd *tensor.Tensor, n, d int, x, g, b *tensor.Tensor) error {
	v, err := hostArgs("vlm.HostOps.LayerNorm", []string{"h", "xhat", "rstd", "x", "g", "b"},
		[]*tensor.Tensor{h, xhat, rstd, x, g, b}, []int{n * d, n * d, n, n * d, d, d})
	if err != nil {
		return err
	}
	layerNorm(n, d, v[3], v[4], v[5], v[1], v[2], v[0])
	return nil
}

func (o HostOps) LayerNormBack(dx, dg, db *tensor.Tensor, n, d int, dh, xhat, rstd, g *tensor.Tensor) error {
	v, err := hostArgs("vlm.HostOps.LayerNormBack", []string{"dx", "dg", "db", "dh", "xhat", "rstd", "g"},
		[]*tensor.Tensor{dx, dg, db, dh, xhat, rstd, g}, []int{n * d, d, d, n * d, n * d, n, d})
	if err != nil {
		return err
	}
	layerNormBack(n, d, v[3], v[4], v[5], v[6], v[1], v[2], v[0])
	return nil
}

func (o HostOps) AddBias(y *tensor.Tensor, n, d int, b *tensor.Tensor) error {
	v, err := hostArgs("vlm.HostOps.AddBias", []string{"y", "b"}, []*tensor.Tensor{y, b}, []int{n * d, d})
	if err != nil {
		return err
	}
	addBias(n, d, v[0], v[1])
	return nil
}

func (o HostOps) ColSum(db *tensor.Tensor, n, d int, dy *tensor.Tensor) error {
	v, err := hostArgs("vlm.HostOps.ColSum", []string{"db", "dy"}, []*tensor.Tensor{db, dy}, []int{d, n * d})
	if err != nil {
		return err
	}
	colSum(n, d, v[1], v[0])
	return nil
}

func (o HostOps) GELU(a *tensor.Tensor, n int, u *tensor.Tensor) error {
	v, err := hostArgs("vlm.HostOps.GELU", []string{"a", "u"}, []*tensor.Tensor{a, u}, []int{n, n})
	if err != nil {
		return err
	}
	gelu(v[1], v[0], false)
	return nil
}

func (o HostOps) GELUBack(da *tensor.Tensor, n int, u *tensor.Tensor) error {
	v, err := hostArgs("vlm.HostOps.GELUBack", []string{"da", "u"}, []*tensor.Tensor{da, u}, []int{n, n})
	if err != nil {
		return err
	}
	geluBack(v[1], v[0], false)
	return nil
}

func (o HostOps) Attention(ao, p *tensor.Tensor, b, s int, qkv *tensor.Tensor) error {
	c := o.Config
	v, err := hostArgs("vlm.HostOps.Attention", []string{"ao", "p", "qkv"}, []*tensor.Tensor{ao, p, qkv},
		[]int{b * s * c.Dim, b * c.Heads * s * s, b * s * 3 * c.Dim})
	if err != nil {
		return err
	}
	clear(v[1])
	attention(c, b, s, v[2], v[1], v[0], false)
	return nil
}

func (o HostOps) AttentionBack(dqkv *tensor.Tensor, b, s int, qkv, p, dao *tensor.Tensor) error {
	c := o.Config
	v, err := hostArgs("vlm.HostOps.AttentionBack", []string{"dqkv", "qkv", "p", "dao"}, []*tensor.Tensor{dqkv, qkv, p, dao},
		[]int{b * s * 3 * c.Dim, b * s * 3 * c.Dim, b * c.Heads * s * s, b * s * c.Dim})
	if err != nil {
		return err
	}
	attentionBack(c, b, s, v[1], v[2], v[3], v[0], false)
	return nil
}

func (o HostOps) PatchEmbed(x *tensor.Tensor, b, s int, e, pb, pos *tensor.Tensor) error {
	c := o.Config
	d, np := c.Dim, c.Patches()
	v, err := hostArgs("vlm.HostOps.PatchEmbed", []string{"x", "e", "pb", "pos"}, []*tensor.Tensor{x, e, pb, pos},
		[]int{b * s * d, b * np * d, d, np * d})
	if err != nil {
		return err
	}
	patchEmbed(c, b, s, v[0], v[1], v[2], v[3])
	return nil
}

// hostTokens returns b·l token ids of tokens checked against the vocabulary.
func hostTokens(op string, c Config, tokens *tensor.Tensor, n int) ([]int32, error) {
	if tokens == nil {
		return nil, tensor.Errorf(tensor.ErrShape, op, "tokens", "is nil")
	}
	ids, err := tokens.Int32s()
	if err != nil {
		return nil, err
	}
	if len(ids) < n {
		return nil, tensor.Errorf(tensor.ErrShape, op, "tokens", "has %d ids, needs %d", len(ids), n)
	}
	for i, id := range ids[:n] {
		if id < 0 || int(id) >= c.Vocab {
			return nil, tensor.Errorf(tensor.ErrParam, op, "tokens", "id %d at %d is outside [0, %d)", id, i, c.Vocab)
		}
	}
	return ids[:n], nil
}

func (o HostOps) TokenEmbed(x *tensor.Tensor, b, l, s int, tokens, emb, pos *tensor.Tensor) error {
	const op = "vlm.HostOps.TokenEmbed"
	c := o.Config
	ids, err := hostTokens(op, c, tokens, b*l)
	if err != nil {
		return err
	}
	v, err := hostArgs(op, []string{"x", "emb", "pos"}, []*tensor.Tensor{x, emb, pos}, []int{b * s * c.Dim, c.Vocab * c.Dim, l * c.Dim})
	if err != nil {
		return err
	}
	tokenEmbed(c, b, l, s, v[0], ids, v[1], v[2])
	return nil
}

func (o HostOps) PatchEmbedBack(dimg, dpos *tensor.Tensor, b, s int, dx *tensor.Tensor) error {
	c := o.Config
	d, np := c.Dim, c.Patches()
	v, err := hostArgs("vlm.HostOps.PatchEmbedBack", []string{"dimg", "dpos", "dx"}, []*tensor.Tensor{dimg, dpos, dx},
		[]int{b * np * d, np * d, b * s * d})
	if err != nil {
		return err
	}
	patchEmbedBack(c, b, s, v[0], v[1], v[2])
	return nil
}

func (o HostOps) TokenEmbedBack(demb, dpos *tensor.Tensor, b, l, s int, dx, tokens *tensor.Tensor) error {
	const op = "vlm.HostOps.TokenEmbedBack"
	c := o.Config
	ids, err := hostTokens(op, c, tokens, b*l)
	if err != nil {
		return err
	}
	v, err := hostArgs(op, []string{"demb", "dpos", "dx"}, []*tensor.Tensor{demb, dpos, dx}, []int{c.Vocab * c.Dim, l * c.Dim, b * s * c.Dim})
	if err != nil {
		return err
	}
	tokenEmbedBack(c, b, l, s, v[0], v[1], v[2], ids)
	return nil
}

func (o HostOps) TextRows(xt *tensor.Tensor, b, l, s int, x *tensor.Tensor) error {
	d := o.Config.Dim
	v, err := hostArgs("vlm.HostOps.TextRows", []string{"xt", "x"}, []*tensor.Tensor{xt, x}, []int{b * l * d, b * s * d})
	if err != nil {
		return err
	}
	textRows(o.Config, b, l, s, v[0], v[1])
	return nil
}

func (o HostOps) TextRowsBack(dx *tensor.Tensor, b, l, s int, dxt *tensor.Tensor) error {
	d := o.Config.Dim
	v, err := hostArgs("vlm.HostOps.TextRowsBack", []string{"dx", "dxt"}, []*tensor.Tensor{dx, dxt}, []int{b * s * d, b * l * d})
	if err != nil {
		return err
	}
	textRowsBack(o.Config, b, l, s, v[0], v[1])
	return nil
}

func (o HostOps) AttentionMass(acc *tensor.Tensor, b, s, group, groups int, p, span *tensor.Tensor) error {
	const op = "vlm.HostOps.AttentionMass"
	c := o.Config
	pv, err := f32(op, "p", p, b*c.Heads*s*s)
	if err != nil {
		return err
	}
	sp, err := i32(op, "span", span, 2*b)
	if err != nil {
		return err
	}
	w := 2 + 2*groups
	bits, err := i32(op, "acc", acc, 2*b*w)
	if err != nil {
		return err
	}
	if group < 0 || group >= groups {
		return tensor.Errorf(tensor.ErrParam, op, "group", "%d is outside [0, %d)", group, groups)
	}
	for r := range b {
		if plen, n := int(sp[2*r]), int(sp[2*r+1]); plen < 1 || n < 0 || c.Patches()+plen-1+n > s {
			return tensor.Errorf(tensor.ErrParam, op, "span", "row %d: prompt %d and response %d do not fit %d tokens", r, plen, n, s-c.Patches())
		}
	}
	v := make([]float64, b*w)
	for i := range v {
		v[i] = math.Float64frombits(uint64(uint32(bits[2*i])) | uint64(uint32(bits[2*i+1]))<<32)
	}
	attentionMass(c, b, s, group, groups, pv, sp, v)
	for i, x := range v {
		u := math.Float64bits(x)
		bits[2*i], bits[2*i+1] = int32(uint32(u)), int32(uint32(u>>32))
	}
	return nil
}

// attnScale is 1/√(D/H), the attention logits' scale.
func attnScale(c Config) float32 { return float32(1 / math.Sqrt(float64(c.Dim/c.Heads))) }
