package qwenvl

import (
	"fmt"
	"slices"

	"github.com/mtrl-go/mtrl/tensor"
)

// Processor is Qwen2VLImageProcessor (the slow, Pillow-based one) for one configuration.
type Processor struct {
	cfg ProcessorConfig
	lut [3][256]float32 // byte → rescaled, normalised value, per channel
}

// NewProcessor validates cfg and precomputes the byte-to-float table: the value of byte v in
// channel c is float32(float64(v)·rescale_factor), then (x − float32(mean)) / float32(std) in
// float32, the operations and roundings of Hugging Face's rescale and normalize.
func NewProcessor(cfg ProcessorConfig) (*Processor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Processor{cfg: cfg}
	for c := range 3 {
		mean, std := float32(cfg.ImageMean[c]), float32(cfg.ImageStd[c])
		for v := range 256 {
			x := float32(v)
			if cfg.DoRescale {
				x = float32(float64(v) * cfg.RescaleFactor)
			}
			if cfg.DoNormalize {
				x = (x - mean) / std
			}
			p.lut[c][v] = x
		}
	}
	return p, nil
}

// Config returns the processor's configuration.
func (p *Processor) Config() ProcessorConfig { return p.cfg }

// Grid is one image's or video's image_grid_thw: temporal patches, patch rows, patch columns.
type Grid struct{ T, H, W int }

// Tokens is the number of language-model tokens the vision tower makes of the grid:
// T·H·W / merge_size².
func (g Grid) Tokens(mergeSize int) int { return g.T * g.H * g.W / (mergeSize * mergeSize) }

// Patches is pixel_values (or pixel_values_videos) with its grids: row r of Values is patch r of
// the concatenation of all inputs, Cols = 3·temporal_patch_size·patch_size² values each.
type Patches struct {
	Values     []float32
	Rows, Cols int
	Grids      []Grid
	Resized    []*RGB // each input's first frame after resizing (what Pillow returns), for checks
}

// Images preprocesses each image as Qwen2VLImageProcessor.preprocess(images=...) does: each
// image is one temporal patch (the frame repeated temporal_patch_size times), and the patches of
// all images are concatenated in order, as a row's several images are.
func (p *Processor) Images(images []*RGB) (Patches, error) {
	var out Patches
	for i, img := range images {
		if err := p.appendFrames(&out, []*RGB{img}); err != nil {
			return Patches{}, fmt.Errorf("qwenvl.Processor.Images: image %d: %w", i, err)
		}
	}
	return out, nil
}

// Video preprocesses the frames of each video as preprocess(videos=...) does: every frame is
// resized to the size smart_resize gives the video's first frame, the last frame is repeated up
// to a multiple of temporal_patch_size, and each temporal_patch_size frames make one temporal
// patch. Frames must already be sampled (by fps, up to a frame cap): no video is decoded here.
func (p *Processor) Video(videos [][]*RGB) (Patches, error) {
	var out Patches
	for i, frames := range videos {
		if len(frames) == 0 {
			return Patches{}, tensor.Errorf(tensor.ErrShape, "qwenvl.Processor.Video", "videos", "video %d has no frames", i)
		}
		if err := p.appendFrames(&out, frames); err != nil {
			return Patches{}, fmt.Errorf("qwenvl.Processor.Video: video %d: %w", i, err)
		}
	}
	return out, nil
}

// appendFrames resizes, rescales, normalises and patchifies one image or video onto out.
func (p *Processor) appendFrames(out *Patches, frames []*RGB) error {
	c := p.cfg
	for _, f := range frames {
		if f == nil || f.Width <= 0 || f.Height <= 0 || len(f.Pix) != 3*f.Width*f.Height {
			return tensor.Errorf(tensor.ErrShape, "qwenvl.Processor", "frame", "need a non-empty RGB image with 3·width·height bytes")
		}
	}
	h, w := frames[0].Height, frames[0].Width
	if c.DoResize {
		var err error
		if h, w, err = SmartResize(h, w, c.Factor(), c.MinPixels, c.MaxPixels); err != nil {
			return err
		}
	}
	if h%c.Factor() != 0 || w%c.Factor() != 0 {
		return tensor.Errorf(tensor.ErrShape, "qwenvl.Processor", "frame", "%d×%d is not a multiple of patch_size·merge_size = %d (do_resize is false)", w, h, c.Factor())
	}
	resized := make([]*RGB, len(frames))
	for i, f := range frames {
		if !c.DoResize {
			if f.Width != w || f.Height != h {
				return tensor.Errorf(tensor.ErrShape, "qwenvl.Processor", "frame", "frame %d is %d×%d, frame 0 is %d×%d (do_resize is false)", i, f.Width, f.Height, w, h)
			}
			resized[i] = f
			continue
		}
		r, err := ResizeBicubic(f, w, h)
		if err != nil {
			return err
		}
		resized[i] = r
	}
	for len(resized)%c.TemporalPatchSize != 0 {
		resized = append(resized, resized[len(resized)-1])
	}
	g := Grid{T: len(resized) / c.TemporalPatchSize, H: h / c.PatchSize, W: w / c.PatchSize}
	cols := 3 * c.TemporalPatchSize * c.PatchSize * c.PatchSize
	if out.Cols != 0 && out.Cols != cols {
		return tensor.Errorf(tensor.ErrShape, "qwenvl.Processor", "frame", "patch width %d differs from the earlier %d", cols, out.Cols)
	}
	rows := g.T * g.H * g.W
	start := len(out.Values)
	out.Values = slices.Grow(out.Values, rows*cols)[:start+rows*cols]
	p.patchify(out.Values[start:], resized, g)
	out.Rows += rows
	out.Cols = cols
	out.Grids = append(out.Grids, g)
	out.Resized = append(out.Resized, resized[0])
	return nil
}

// patchify writes frames into dst in Hugging Face's order: the frames viewed as
// [T, tps, C, H/m, m, p, W/m, m, p] (channels first) and permuted to
// [T, H/m, W/m, m, m, C, tps, p, p], so a row is one p×p patch over C channels and tps frames,
// and the rows of one m×m merge window are consecutive. Each distinct frame is first turned
// into normalised channel planes, so that a patch row is copied p values at a time.
func (p *Processor) patchify(dst []float32, frames []*RGB, g Grid) {
	c := p.cfg
	ps, m, tps := c.PatchSize, c.MergeSize, c.TemporalPatchSize
	width, height := frames[0].Width, frames[0].Height
	planes := make([][]float32, len(frames)) // [3·H·W] per frame, channel-major
	for i, f := range frames {
		if i > 0 && f == frames[i-1] { // a repeated frame (an image, or a video's padding)
			planes[i] = planes[i-1]
			continue
		}
		pl := make([]float32, 3*height*width)
		r, gr, b := pl[:height*width], pl[height*width:2*height*width], pl[2*height*width:]
		for j := range height * width {
			px := f.Pix[3*j : 3*j+3]
			r[j], gr[j], b[j] = p.lut[0][px[0]], p.lut[1][px[1]], p.lut[2][px[2]]
		}
		planes[i] = pl
	}
	i := 0
	for t := range g.T {
		for bh := range g.H / m {
			for bw := range g.W / m {
				for mh := range m {
					for mw := range m {
						y0, x0 := (bh*m+mh)*ps, (bw*m+mw)*ps
						for ch := range 3 {
							for tt := range tps {
								plane := planes[t*tps+tt][ch*height*width:]
								for py := range ps {
									src := plane[(y0+py)*width+x0:]
									i += copy(dst[i:i+ps], src[:ps])
								}
							}
						}
					}
				}
			}
		}
	}
}
