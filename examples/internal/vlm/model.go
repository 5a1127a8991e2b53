package vlm

import (
	"math"

	"github.com/mtrl-go/mtrl/tensor"
)

// Param is one trainable tensor and its gradient, both float32 CPU tensors of the same shape.
type Param struct {
	Name string
	W, G *tensor.Tensor
}

// Model is the policy: a small vision-language decoder. It is not safe for concurrent use
// (Forward and Generate only read the weights and may run concurrently with each other, but
// not with Backward, ZeroGrad or an optimizer step).
type Model struct {
	Config Config

	params []*Param
	w, g   weights[float32] // views of the Param tensors' host slices

	dev *resident // the copy on an op set's backend, where Forward and Backward run (UseOps)
}

// New builds a model with weights drawn deterministically from seed: linear weights
// N(0, 1/fan_in) (residual projections further scaled by 1/√(2·Layers)), token embeddings N(0,1),
// position embeddings with standard deviation 0.1, LayerNorm gains 1 and all biases 0.
func New(cfg Config, seed uint64) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Model{Config: cfg}
	vals := initValues(cfg, seed)
	grads := make([][]float32, len(vals))
	for i, p := range specs(cfg) {
		grads[i] = make([]float32, len(vals[i]))
		w, err := tensor.FromFloat32(vals[i], p.shape...)
		if err != nil {
			return nil, err
		}
		g, err := tensor.FromFloat32(grads[i], p.shape...)
		if err != nil {
			return nil, err
		}
		m.params = append(m.params, &Param{Name: p.name, W: w, G: g})
	}
	m.w = bind(cfg, vals)
	m.g = bind(cfg, grads)
	return m, nil
}

// Params returns the trainable parameters in a stable order with stable names ("patch.w",
// "tok.emb", "block0.attn.wqkv", …, "head.b"). Updating W's values in place (an optimizer step,
// loading a checkpoint with tensor.CopyInto) changes the model; replacing the tensors does not.
// After UseOps the host tensors are brought up to date first, and the device copy is refreshed
// from them at its next use (see UseOps).
func (m *Model) Params() []*Param {
	m.hostAccess()
	return m.params
}

// NumParams is the total number of trainable values.
func (m *Model) NumParams() int {
	n := 0
	for _, p := range m.params {
		n += p.W.Len()
	}
	return n
}

// ZeroGrad sets every gradient to zero (on the op set's backend too, after UseOps).
func (m *Model) ZeroGrad() {
	for _, g := range m.g.slots() {
		clear(*g)
	}
	m.zeroDeviceGrad()
}

// Activations is the record of one Forward pass that Backward needs. It holds all
// intermediate values of the batch (about 12·B·(NP+L)·Dim + Heads·B·(NP+L)² floats per block).
type Activations struct {
	m *Model
	a *acts[float32]

	dev   *OpsActivations   // the record on the model's op set (UseOps) instead of a
	probs map[int][]float32 // attention probabilities of dev's layers, downloaded on demand
}

// Rows and Len are the batch size and text length of the recorded pass.
func (a *Activations) Rows() int {
	if a.dev != nil {
		return a.dev.b
	}
	return a.a.b
}
func (a *Activations) Len() int {
	if a.dev != nil {
		return a.dev.l
	}
	return a.a.l
}

// checkImages validates images [B, H, W, C] uint8 and returns the host bytes.
func (m *Model) checkImages(op string, images *tensor.Tensor, b int) ([]uint8, error) {
	c := m.Config
	if images == nil {
		return nil, tensor.Errorf(tensor.ErrShape, op, "images", "is nil")
	}
	if err := tensor.CheckDType(op, "images", images, tensor.Uint8); err != nil {
		return nil, err
	}
	if err := tensor.CheckShape(op, "images", images, b, c.ImageSize, c.ImageSize, c.Channels); err != nil {
		return nil, err
	}
	px, err := images.Uint8s()
	if err != nil {
		return nil, tensor.Errorf(tensor.ErrBackend, op, "images", "must be a host tensor: %v", err)
	}
	return px, nil
}

// checkTokens validates tokens [B, L] int32 with B ≥ 1 and 1 ≤ L ≤ MaxLen and returns B, L.
func checkTokens(op string, c Config, tokens *tensor.Tensor) (b, l int, err error) {
	if tokens == nil {
		return 0, 0, tensor.Errorf(tensor.ErrShape, op, "tokens", "is nil")
	}
	if err := tensor.CheckDType(op, "tokens", tokens, tensor.Int32); err != nil {
		return 0, 0, err
	}
	if err := tensor.CheckShape(op, "tokens", tokens, -1, -1); err != nil {
		return 0, 0, err
	}
	b, l = tokens.Dim(0), tokens.Dim(1)
	if b < 1 || l < 1 {
		return 0, 0, tensor.Errorf(tensor.ErrShape, op, "tokens", "shape %v is empty", tokens.Shape())
	}
	if l > c.MaxLen {
		return 0, 0, tensor.Errorf(tensor.ErrShape, op, "tokens", "length %d exceeds MaxLen %d", l, c.MaxLen)
	}
	return b, l, nil
}

// Forward runs the model on a batch: images [B, H, W, C] uint8 (H = W = ImageSize,
// C = Channels) and tokens [B, L] int32 (prompt then response, right-padded with PAD;
// 1 ≤ L ≤ MaxLen, ids in [0, Vocab)). It returns logits [B, L, V] float32 where logits[b, t]
// predicts tokens[b, t+1], and the activation record for Backward. Text tokens attend causally to
// earlier text and to all image patches; patches attend to all patches (never to text), so
// padding at the end of a row does not change the logits before it.
func (m *Model) Forward(images, tokens *tensor.Tensor) (*tensor.Tensor, *Activations, error) {
	const op = "vlm.Model.Forward"
	c := m.Config
	b, l, err := checkTokens(op, c, tokens)
	if err != nil {
		return nil, nil, err
	}
	if m.dev != nil {
		return m.forwardOps(images, tokens)
	}
	ids, err := tokens.Int32s()
	if err != nil {
		return nil, nil, tensor.Errorf(tensor.ErrBackend, op, "tokens", "must be a host tensor: %v", err)
	}
	for i, id := range ids {
		if id < 0 || int(id) >= c.Vocab {
			return nil, nil, tensor.Errorf(tensor.ErrParam, op, "tokens", "id %d at [%d, %d] is outside [0, %d)", id, i/l, i%l, c.Vocab)
		}
	}
	px, err := m.checkImages(op, images, b)
	if err != nil {
		return nil, nil, err
	}
	pv := patchVectors[float32](c, px, b)
	logits, a := forward(c, &m.w, pv, append([]int32(nil), ids...), b, l)
	out, err := tensor.FromFloat32(logits, b, l, c.Vocab)
	if err != nil {
		return nil, nil, err
	}
	return out, &Activations{m: m, a: a}, nil
}

// Backward accumulates into the parameters' G the gradients of sum(dlogits ⊙ logits) for the
// pass recorded in act; dlogits is [B, L, V] float32 like the logits of that pass. It may be
// called more than once per record; NaN and Inf propagate.
func (m *Model) Backward(act *Activations, dlogits *tensor.Tensor) error {
	const op = "vlm.Model.Backward"
	if act == nil || (act.a == nil && act.dev == nil) {
		return tensor.Errorf(tensor.ErrParam, op, "act", "is nil")
	}
	if act.m != m {
		return tensor.Errorf(tensor.ErrParam, op, "act", "was recorded by another model")
	}
	if dlogits == nil {
		return tensor.Errorf(tensor.ErrShape, op, "dlogits", "is nil")
	}
	if err := tensor.CheckDType(op, "dlogits", dlogits, tensor.Float32); err != nil {
		return err
	}
	if err := tensor.CheckShape(op, "dlogits", dlogits, act.Rows(), act.Len(), m.Config.Vocab); err != nil {
		return err
	}
	if act.dev != nil {
		return m.backwardOps(act, dlogits)
	}
	dl, err := dlogits.Float32s()
	if err != nil {
		return tensor.Errorf(tensor.ErrBackend, op, "dlogits", "must be a host tensor: %v", err)
	}
	backward(m.Config, &m.w, &m.g, act.a, dl)
	return nil
}

// Layers is the number of decoder blocks recorded.
func (a *Activations) Layers() int { return a.m.Config.Layers }

// Attention returns, in block layer of the recorded pass, the attention mass of row's text
// position t (the query) on the image tokens and on the text tokens, averaged over heads, with
// the number of keys of each kind it may attend (the image tokens, and text 0..t). The masses
// sum to 1.
func (a *Activations) Attention(layer, row, t int) (image, text float64, nImage, nText int) {
	c := a.m.Config
	np := c.Patches()
	s := np + a.Len()
	p := a.attentionProbs(layer)
	q := np + t
	for h := range c.Heads {
		base := ((row*c.Heads+h)*s + q) * s
		for k := range np {
			image += float64(p[base+k])
		}
		for k := np; k <= q; k++ {
			text += float64(p[base+k])
		}
	}
	return image / float64(c.Heads), text / float64(c.Heads), np, t + 1
}

// AttentionSums is one row's response attention (Activations.ResponseAttention).
type AttentionSums struct {
	// Text and Vision are the per-key attention on text and on image tokens (Attention's
	// mass / keys) summed over the blocks and the response queries; GroupText and GroupVision
	// the same sums per group of blocks.
	Text, Vision           float64
	GroupText, GroupVision []float64
}

// ResponseAttention sums, for each row r of the recorded pass whose prompt has plen[r] tokens
// (BOS included) and whose response has n[r], the attention of its response queries (text
// positions plen[r]−1+j, j < n[r]): Attention's image and text masses divided by their numbers
// of keys, added in block-then-query order, overall and per group of blocks (block l is in
// group l·groups/Layers). On an op set (UseOps) the sums run there (Ops.AttentionMass) and only
// the rows' 2+2·groups float64 sums come down, with the host's bits.
func (a *Activations) ResponseAttention(plen, n []int, groups int) ([]AttentionSums, error) {
	const op = "vlm.Activations.ResponseAttention"
	b, L := a.Rows(), a.Layers()
	if len(plen) != b || len(n) != b {
		return nil, tensor.Errorf(tensor.ErrShape, op, "plen", "has %d and n %d rows, the pass %d", len(plen), len(n), b)
	}
	if groups < 1 {
		return nil, tensor.Errorf(tensor.ErrParam, op, "groups", "%d is below 1", groups)
	}
	span := make([]int32, 2*b)
	for r := range b {
		if plen[r] < 1 || n[r] < 0 || plen[r]-1+n[r] > a.Len() {
			return nil, tensor.Errorf(tensor.ErrParam, op, "plen", "row %d: prompt %d and response %d do not fit %d tokens", r, plen[r], n[r], a.Len())
		}
		span[2*r], span[2*r+1] = int32(plen[r]), int32(n[r])
	}
	w := 2 + 2*groups
	s := a.m.Config.Patches() + a.Len()
	acc := make([]float64, b*w)
	if a.dev == nil {
		for l := range L {
			attentionMass(a.m.Config, b, s, l*groups/L, groups, a.a.layers[l].p, span, acc)
		}
	} else if err := a.responseAttentionOps(b, s, groups, span, acc); err != nil {
		return nil, err
	}
	out := make([]AttentionSums, b)
	for r := range out {
		v := acc[r*w:][:w]
		o := AttentionSums{Text: v[0], Vision: v[1], GroupText: make([]float64, groups), GroupVision: make([]float64, groups)}
		for g := range groups {
			o.GroupText[g], o.GroupVision[g] = v[2+2*g], v[3+2*g]
		}
		out[r] = o
	}
	return out, nil
}

// responseAttentionOps runs ResponseAttention's sums on the record's op set: the spans and
// zero sums go up, every block adds its share there, the sums come down into acc.
func (a *Activations) responseAttentionOps(b, s, groups int, span []int32, acc []float64) error {
	ops := a.dev.om.ops
	be := ops.Backend()
	sp, err := tensor.To(be, tensor.Must(tensor.FromInt32(span, len(span))))
	if err != nil {
		return err
	}
	defer sp.Release()
	dacc, err := tensor.To(be, tensor.Must(tensor.FromInt32(make([]int32, 2*len(acc)), 2*len(acc))))
	if err != nil {
		return err
	}
	defer dacc.Release()
	L := a.Layers()
	for l := range L {
		if err := ops.AttentionMass(dacc, b, s, l*groups/L, groups, a.dev.layers[l].p, sp); err != nil {
			return err
		}
	}
	h, err := tensor.To(tensor.CPU(), dacc)
	if err != nil {
		return err
	}
	bits, err := h.Int32s()
	if err != nil {
		return err
	}
	for i := range acc {
		acc[i] = math.Float64frombits(uint64(uint32(bits[2*i])) | uint64(uint32(bits[2*i+1]))<<32)
	}
	return nil
}
