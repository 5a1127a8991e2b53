package perturb

import (
	"image"

	"github.com/mtrl-go/mtrl/internal/enum"
	"github.com/mtrl-go/mtrl/internal/parallel"
	"github.com/mtrl-go/mtrl/tensor"
)

// Kind names a perturbation, with the reference's names.
type Kind int

const (
	// PatchBlackening blackens random square patches ("patch_blackening"); the VPPO default.
	PatchBlackening Kind = iota
	// GaussianNoise adds Gaussian noise ("gaussian_noise").
	GaussianNoise
	// CompleteMasking fills the whole image with a constant ("complete_masking").
	CompleteMasking
	// GaussianBlur blurs the image ("gaussian_blur"; an mtrl extension, see Blur).
	GaussianBlur
)

var kinds = enum.Table[Kind]{Type: "perturb.Kind", Noun: "kind",
	Names: []string{
		PatchBlackening: "patch_blackening", GaussianNoise: "gaussian_noise",
		CompleteMasking: "complete_masking", GaussianBlur: "gaussian_blur",
	},
	Errorf: tensor.Errorf, Sentinel: tensor.ErrParam}

// String returns the kind's name, e.g. "patch_blackening".
func (k Kind) String() string { return kinds.String(k) }

// Valid reports whether k is one of the defined kinds.
func (k Kind) Valid() bool { return kinds.Valid(k) }

// ParseKind parses "patch_blackening", "gaussian_noise", "complete_masking" or "gaussian_blur";
// anything else is an ErrParam error.
func ParseKind(s string) (Kind, error) {
	if k, ok := kinds.Lookup(s); ok {
		return k, nil
	}
	return 0, tensor.Errorf(tensor.ErrParam, "perturb.ParseKind", "s", "unknown perturbation %q (want patch_blackening, gaussian_noise, complete_masking or gaussian_blur)", s)
}

// MarshalText implements encoding.TextMarshaler.
func (k Kind) MarshalText() ([]byte, error) { return kinds.MarshalText(k) }

// UnmarshalText implements encoding.TextUnmarshaler using ParseKind.
func (k *Kind) UnmarshalText(b []byte) error { return enum.UnmarshalText(k, b, ParseKind) }

// Perturbation is an image perturbation a trainer applies before computing the perturbed
// log-probs. Blackening, Noise, Masking and Blur implement it.
//
// Apply perturbs one image src ([H, W] or [H, W, C], C = 1, 3 or 4, uint8) into dst (same shape
// and backend; dst may be src). ApplyBatch perturbs a batch [N, H, W] or [N, H, W, C] with one
// sample id per image. The result for an image depends only on (seed, its sample id) and the
// image: not on its position in the batch, the batch size or GOMAXPROCS. Deterministic
// perturbations (Masking, Blur) ignore seed and ids.
type Perturbation interface {
	Kind() Kind
	Validate() error
	Apply(dst, src *tensor.Tensor, seed, sampleID uint64) error
	ApplyBatch(dst, src *tensor.Tensor, seed uint64, ids []uint64) error
}

// Default returns the perturbation of the given kind with the reference's defaults:
// DefaultBlackening, DefaultNoise, Masking{} (fill 0) and DefaultBlur.
func Default(kind Kind) (Perturbation, error) {
	switch kind {
	case PatchBlackening:
		return DefaultBlackening(), nil
	case GaussianNoise:
		return DefaultNoise(), nil
	case CompleteMasking:
		return Masking{}, nil
	case GaussianBlur:
		return DefaultBlur(), nil
	}
	return nil, tensor.Errorf(tensor.ErrParam, "perturb.Default", "kind", "unknown kind %v", kind)
}

// ApplyImage perturbs an image.Image: it converts img with FromImage, applies p with the given
// seed and sample id, and converts back with ToImage.
func ApplyImage(p Perturbation, img image.Image, seed, sampleID uint64) (image.Image, error) {
	if p == nil {
		return nil, tensor.Errorf(tensor.ErrParam, "perturb.ApplyImage", "p", "is nil")
	}
	t, err := FromImage(img)
	if err != nil {
		return nil, err
	}
	if err := p.Apply(t, t, seed, sampleID); err != nil {
		return nil, err
	}
	return ToImage(t)
}

// geom describes one image: height, width, channels (1 for [H, W]) and whether the image is
// [H, W] (gray2D: its last axis is the width).
type geom struct {
	h, w, c int
	gray2D  bool
}

func (g geom) size() int { return g.h * g.w * g.c }

// checkImages validates src and dst as one image (batched false) or a batch, and returns the
// batch size and the geometry of one image.
func checkImages(op string, dst, src *tensor.Tensor, batched bool) (int, geom, error) {
	if src == nil {
		return 0, geom{}, tensor.Errorf(tensor.ErrShape, op, "src", "is nil")
	}
	if err := tensor.CheckSameShape(op, "src", src, "dst", dst); err != nil {
		return 0, geom{}, err
	}
	for _, a := range []struct {
		n string
		t *tensor.Tensor
	}{{"src", src}, {"dst", dst}} {
		if err := tensor.CheckDType(op, a.n, a.t, tensor.Uint8); err != nil {
			return 0, geom{}, err
		}
	}
	if err := tensor.CheckSameBackend(op, []string{"src", "dst"}, src, dst); err != nil {
		return 0, geom{}, err
	}
	n, g, err := imageGeom(op, "src", src.Shape(), batched)
	return n, g, err
}

func imageGeom(op, arg string, s tensor.Shape, batched bool) (int, geom, error) {
	n := 1
	if batched {
		if len(s) < 1 {
			return 0, geom{}, tensor.Errorf(tensor.ErrShape, op, arg, "has shape %v, want a batch [N, H, W] or [N, H, W, C]", s)
		}
		n, s = s[0], s[1:]
	}
	var g geom
	switch len(s) {
	case 2:
		g = geom{h: s[0], w: s[1], c: 1, gray2D: true}
	case 3:
		g = geom{h: s[0], w: s[1], c: s[2]}
		if g.c != 1 && g.c != 3 && g.c != 4 {
			return 0, geom{}, tensor.Errorf(tensor.ErrShape, op, arg, "has %d channels, want 1, 3 or 4", g.c)
		}
	default:
		want := "[H, W] or [H, W, C]"
		if batched {
			want = "[N, H, W] or [N, H, W, C]"
		}
		return 0, geom{}, tensor.Errorf(tensor.ErrShape, op, arg, "has shape %v, want %s", s, want)
	}
	return n, g, nil
}

// run validates the arguments and calls fn on each image's host bytes, in parallel over images.
// ids is nil for a single image (which gets sampleID).
func run(op string, dst, src *tensor.Tensor, batched bool, ids []uint64, sampleID uint64, fn func(d, s []uint8, g geom, id uint64)) error {
	n, g, err := checkImages(op, dst, src, batched)
	if err != nil {
		return err
	}
	if batched && len(ids) != n {
		return tensor.Errorf(tensor.ErrShape, op, "ids", "has %d sample ids, the batch has %d images", len(ids), n)
	}
	return tensor.OnHost(1, []*tensor.Tensor{dst, src}, func(h []*tensor.Tensor) error {
		d, _ := h[0].Uint8s()
		s, _ := h[1].Uint8s()
		if !batched {
			fn(d, s, g, sampleID)
			return nil
		}
		sz := g.size()
		parallel.For(n, 1, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				fn(d[i*sz:(i+1)*sz], s[i*sz:(i+1)*sz], g, ids[i])
			}
		})
		return nil
	})
}
