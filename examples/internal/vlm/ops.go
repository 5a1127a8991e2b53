package vlm

import (
	"github.com/mtrl-go/mtrl/tensor"
)

// Ops is what the model needs from a backend beyond the SDK's ops (tensor.LinearBias,
// LayerNorm, Attention, Embedding, Activate and their backwards, which every layer runs): an
// elementwise sum, for the residual stream and for gradients that arrive from two places. HostOps
// is the CPU's; CUDAOps (built with the `cuda` tag) also brings the device sampler and
// optimizer kernels the trainer uses.
type Ops interface {
	Backend() tensor.Backend
	// Add adds the first n values of x to acc (float32 tensors holding at least n values).
	Add(acc, x *tensor.Tensor, n int) error
}

// HostOps is the op set on CPU tensors.
type HostOps struct{ Config Config }

var _ Ops = HostOps{}

// Backend returns tensor.CPU().
func (HostOps) Backend() tensor.Backend { return tensor.CPU() }

// Add adds x to acc on the host.
func (HostOps) Add(acc, x *tensor.Tensor, n int) error {
	const op = "vlm.HostOps.Add"
	a, err := f32(op, "acc", acc, n)
	if err != nil {
		return err
	}
	v, err := f32(op, "x", x, n)
	if err != nil {
		return err
	}
	for i, x := range v {
		a[i] += x
	}
	return nil
}

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

// patchVectors flattens images [B, H, W, C] into patch vectors [B·NP, P²C] (patches in raster
// order, each patch row-major with channels innermost), mapping 0..255 to -1..1.
func patchVectors(c Config, img []uint8, b int) []float32 {
	p, ch, hw := c.PatchSize, c.Channels, c.ImageSize
	g := hw / p
	np, pl := c.Patches(), c.patchLen()
	out := make([]float32, b*np*pl)
	for r := range b {
		im := img[r*hw*hw*ch:]
		for py := range g {
			for px := range g {
				dst := out[((r*np)+py*g+px)*pl:]
				k := 0
				for dy := range p {
					src := im[((py*p+dy)*hw+px*p)*ch:]
					for j := range p * ch {
						dst[k] = float32(src[j])*(2.0/255) - 1
						k++
					}
				}
			}
		}
	}
	return out
}

// lnEps is the LayerNorms' ε.
const lnEps = 1e-5
