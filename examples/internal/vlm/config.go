package vlm

import (
	"github.com/mtrl-go/mtrl/tensor"
)

// Special token ids shared with the example tokenizer (package vqa): Generate stops after EOS.
const (
	PAD int32 = 0
	BOS int32 = 1
	EOS int32 = 2
)

// Config sizes the model. All fields must be positive; ImageSize must be a multiple of
// PatchSize and Dim a multiple of Heads.
type Config struct {
	ImageSize, PatchSize, Channels int // e.g. 32, 8, 3 → 16 patch tokens
	Vocab                          int // tokenizer size
	Dim, Layers, Heads, MLPDim     int // e.g. 64, 2, 4, 128
	MaxLen                         int // max text tokens (prompt + response)
}

// DefaultConfig is the trainer's model: 32-pixel RGB images in 8-pixel patches (16 image
// tokens), width 64, 2 blocks of 4 heads, MLP width 128, up to 64 text tokens.
func DefaultConfig(vocab int) Config {
	return Config{ImageSize: 32, PatchSize: 8, Channels: 3, Vocab: vocab, Dim: 64, Layers: 2, Heads: 4, MLPDim: 128, MaxLen: 64}
}

// Validate reports the first invalid field as an ErrParam naming it.
func (c Config) Validate() error {
	const op = "vlm.Config.Validate"
	for _, f := range []struct {
		name string
		v    int
	}{
		{"ImageSize", c.ImageSize}, {"PatchSize", c.PatchSize}, {"Channels", c.Channels}, {"Vocab", c.Vocab},
		{"Dim", c.Dim}, {"Layers", c.Layers}, {"Heads", c.Heads}, {"MLPDim", c.MLPDim}, {"MaxLen", c.MaxLen},
	} {
		if f.v <= 0 {
			return tensor.Errorf(tensor.ErrParam, op, f.name, "must be positive, got %d", f.v)
		}
		if f.v > 1<<16 {
			return tensor.Errorf(tensor.ErrParam, op, f.name, "%d is too large (at most 65536)", f.v)
		}
	}
	if c.ImageSize%c.PatchSize != 0 {
		return tensor.Errorf(tensor.ErrParam, op, "PatchSize", "%d does not divide ImageSize %d", c.PatchSize, c.ImageSize)
	}
	if c.Dim%c.Heads != 0 {
		return tensor.Errorf(tensor.ErrParam, op, "Heads", "%d does not divide Dim %d", c.Heads, c.Dim)
	}
	return nil
}

// Patches is the number of image tokens, (ImageSize/PatchSize)².
func (c Config) Patches() int { g := c.ImageSize / c.PatchSize; return g * g }

// patchLen is the length of one flattened patch, PatchSize²·Channels.
func (c Config) patchLen() int { return c.PatchSize * c.PatchSize * c.Channels }
