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
	host   *OpsModel // the layers on the Param tensors themselves (HostOps)

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
	m.host = newOpsModel(cfg, HostOps{Config: cfg}, m.params)
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

// ReportFinal implements tprl/loop's FinalGradients for the host model: while hook is set,
// Backward hands it each block's parameter gradients (Params' G tensors) once the rest of the
// backward leaves them unchanged, last block first, so that their reduction over the ranks can
// start. After UseOps it reports nothing and returns false (the device's ops run on a stream).
func (m *Model) ReportFinal(hook func(grads ...*tensor.Tensor)) bool {
	m.host.final = hook
	return m.dev == nil
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
	_ = m.host.ZeroGrad() // host tensors: cannot fail
	m.zeroDeviceGrad()
}

// Activations is the record of one Forward pass that Backward needs: every block's inputs,
// queries, keys, values, attention outputs and log-sum-exps (about 14·B·(NP+L)·Dim + 2·B·(NP+L)·MLPDim
// floats per block; no attention probabilities).
type Activations struct {
	m   *Model
	rec *OpsActivations // on the host or on the model's op set (UseOps)

	lse map[int][2][]float32 // per block: the text queries' log-sum-exps (all keys, image keys)
}

// Rows and Len are the batch size and text length of the recorded pass.
func (a *Activations) Rows() int { return a.rec.b }
func (a *Activations) Len() int  { return a.rec.l }

// checkImages validates images [B, H, W, C] uint8 and returns the host bytes.
func checkImages(op string, c Config, images *tensor.Tensor, b int) ([]uint8, error) {
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
	if _, _, err := checkTokens(op, c, tokens); err != nil {
		return nil, nil, err
	}
	if m.dev != nil {
		return m.forwardOps(images, tokens)
	}
	if !tokens.IsHost() {
		return nil, nil, tensor.Errorf(tensor.ErrBackend, op, "tokens", "must be a host tensor (the model is on the CPU)")
	}
	if !images.IsHost() {
		return nil, nil, tensor.Errorf(tensor.ErrBackend, op, "images", "must be a host tensor")
	}
	logits, rec, err := m.host.Forward(images, tokens)
	if err != nil {
		return nil, nil, err
	}
	return logits, &Activations{m: m, rec: rec}, nil
}

// Backward accumulates into the parameters' G the gradients of sum(dlogits ⊙ logits) for the
// pass recorded in act; dlogits is [B, L, V] float32 like the logits of that pass. It may be
// called more than once per record; NaN and Inf propagate.
func (m *Model) Backward(act *Activations, dlogits *tensor.Tensor) error {
	const op = "vlm.Model.Backward"
	if act == nil || act.rec == nil {
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
	if m.dev != nil {
		return m.backwardOps(act, dlogits)
	}
	if act.rec.om != m.host {
		return tensor.Errorf(tensor.ErrParam, op, "act", "was recorded on another op set")
	}
	if !dlogits.IsHost() {
		return tensor.Errorf(tensor.ErrBackend, op, "dlogits", "must be a host tensor")
	}
	return m.host.Backward(act.rec, dlogits)
}

// Layers is the number of decoder blocks recorded.
func (a *Activations) Layers() int { return a.m.Config.Layers }

// Attention returns, in block layer of the recorded pass, the attention mass of row's text
// position t (the query) on the image tokens and on the text tokens, averaged over heads, with
// the number of keys of each kind it may attend (the image tokens, and text 0..t). The masses
// sum to 1.
func (a *Activations) Attention(layer, row, t int) (image, text float64, nImage, nText int) {
	c := a.m.Config
	lse, err := a.textLSE(layer)
	if err != nil || layer < 0 || layer >= c.Layers || row < 0 || row >= a.Rows() || t < 0 || t >= a.Len() {
		return math.NaN(), math.NaN(), c.Patches(), t + 1
	}
	image, text = queryMass(c.Heads, lse, row*a.Len()+t)
	return image, text, c.Patches(), t + 1
}

// queryMass is text query q's attention mass on the image keys and on the text keys, averaged
// over heads, from lse's log-sum-exps over all its keys (lse[0]) and over the image keys
// (lse[1]): the image mass of a head is exp(lse_image − lse_all), the text mass the rest.
func queryMass(heads int, lse [2][]float32, q int) (image, text float64) {
	for h := range heads {
		d := float64(lse[1][q*heads+h]) - float64(lse[0][q*heads+h])
		image += math.Exp(d)
		text -= math.Expm1(d)
	}
	return image / float64(heads), text / float64(heads)
}

// textLSE returns block layer's log-sum-exps of the text queries on the host, computing the
// image-only ones on the record's backend the first time.
func (a *Activations) textLSE(layer int) ([2][]float32, error) {
	if v, ok := a.lse[layer]; ok {
		return v, nil
	}
	rec := a.rec
	c := rec.om.Config
	if layer < 0 || layer >= c.Layers {
		return [2][]float32{}, tensor.Errorf(tensor.ErrParam, "vlm.Activations.Attention", "layer", "%d is outside [0, %d)", layer, c.Layers)
	}
	e := newExec(rec.om.ops, tensor.NewScratch(rec.om.ops.Backend()))
	defer e.keep.Release()
	defer e.tmp.Release()
	ni, n := rec.b*c.Patches(), rec.b*rec.s
	var out [2][]float32
	for i, t := range []*tensor.Tensor{e.rows(rec.layers[layer].lse, ni, n), e.imageLSE(c, rec, layer)} {
		if e.err != nil {
			return out, e.err
		}
		h, err := tensor.New(tensor.CPU(), tensor.Float32, t.Shape()...)
		if err == nil {
			err = tensor.CopyInto(h, t)
		}
		if err != nil {
			return out, err
		}
		out[i], _ = h.Float32s()
	}
	if a.lse == nil {
		a.lse = map[int][2][]float32{}
	}
	a.lse[layer] = out
	return out, nil
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
// group l·groups/Layers). The masses come from log-sum-exps (queryMass): per block, one more
// attention call on the record's backend scores the text queries against the image keys only.
// On an op set with LSEMass (CUDAOps) the sums run there too and only the rows' 2+2·groups
// float64 sums come down.
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
	acc := make([]float64, b*w)
	if mo, ok := a.rec.om.ops.(massOps); ok {
		if err := a.responseAttentionOps(mo, groups, span, acc); err != nil {
			return nil, err
		}
	} else {
		for l := range L {
			lse, err := a.textLSE(l)
			if err != nil {
				return nil, err
			}
			attentionMass(a.m.Config, a.Len(), l*groups/L, groups, lse, span, acc)
		}
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

// attentionMass adds one block's response attention to acc [b, 2+2·groups], for the rows'
// span [b, 2] = (plen, n) (prompt tokens, BOS included, and response tokens) and the block's
// text log-sum-exps lse (textLSE; l text positions per row): for each response query
// t = plen−1+j (j < n), the mass on the image keys and on the text keys 0..t (queryMass), each
// divided by its number of keys (NP, t+1), is added to acc[r, 0] (text), acc[r, 1] (vision),
// acc[r, 2+2·group] and acc[r, 3+2·group], in query order.
func attentionMass(c Config, l, group, groups int, lse [2][]float32, span []int32, acc []float64) {
	np := c.Patches()
	w := 2 + 2*groups
	for r := range len(span) / 2 {
		plen, n := int(span[2*r]), int(span[2*r+1])
		a := acc[r*w:][:w]
		for j := range n {
			im, tx := queryMass(c.Heads, lse, r*l+plen-1+j)
			pt, pv := tx/float64(plen+j), im/float64(np)
			a[0], a[1] = a[0]+pt, a[1]+pv
			a[2+2*group], a[3+2*group] = a[2+2*group]+pt, a[3+2*group]+pv
		}
	}
}

// massOps is an op set that sums the response attention on its backend (CUDAOps.LSEMass).
type massOps interface {
	LSEMass(acc, lse, lseImg, span *tensor.Tensor, b, l, group, groups int) error
}

// responseAttentionOps is ResponseAttention's sums on the record's backend: the spans and zero
// sums go up, every block adds its share there, the sums come down into acc.
func (a *Activations) responseAttentionOps(mo massOps, groups int, span []int32, acc []float64) error {
	rec := a.rec
	c := rec.om.Config
	e := newExec(rec.om.ops, tensor.NewScratch(rec.om.ops.Backend()))
	defer e.keep.Release()
	defer e.tmp.Release()
	sp := e.ids(span)
	dacc := e.ids(make([]int32, 2*len(acc)))
	ni, n := rec.b*c.Patches(), rec.b*rec.s
	for l := range c.Layers {
		lseImg := e.imageLSE(c, rec, l)
		if e.err != nil {
			return e.err
		}
		e.do(mo.LSEMass(dacc, e.rows(rec.layers[l].lse, ni, n), lseImg, sp, rec.b, rec.l, l*groups/c.Layers, groups))
	}
	if e.err != nil {
		return e.err
	}
	h, err := tensor.To(tensor.CPU(), dacc)
	if err != nil {
		return err
	}
	bits, _ := h.Int32s()
	for i := range acc {
		acc[i] = math.Float64frombits(uint64(uint32(bits[2*i])) | uint64(uint32(bits[2*i+1]))<<32)
	}
	return nil
}
