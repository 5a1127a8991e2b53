package perturb

import (
	"math/rand/v2"

	"github.com/mtrl-go/mtrl/tensor"
)

// Defaults of the reference pipeline (perc_utils.random_patch_blackening as called by the
// trainer): 14-pixel patches, each blackened with probability 0.5.
const (
	DefaultPatchSize = 14
	DefaultBlackProb = 0.5
)

// Grid says which patches of an image are blackened: Black[r*Cols+c] for patch row r and
// patch column c, row-major like the reference's loop.
type Grid struct {
	Rows, Cols int
	Black      []bool
}

// GridSize returns the number of patch rows and columns of an h×w image: ceil(h/ps), ceil(w/ps).
// Edge patches are partial. A negative size or a patch size <= 0 gives 0, 0.
func GridSize(h, w, patchSize int) (rows, cols int) {
	if patchSize <= 0 || h < 0 || w < 0 {
		return 0, 0
	}
	return ceilDiv(h, patchSize), ceilDiv(w, patchSize)
}

// ceilDiv is ceil(a/b) for a >= 0, b > 0, without the overflow of (a+b-1)/b.
func ceilDiv(a, b int) int { return a/b + min(a%b, 1) }

// checkPixels checks that an image of the given dimensions (uint8 elements) could exist: its
// size neither overflows int (tensor.CheckSize) nor exceeds tensor.MaxHostBytes.
func checkPixels(op, arg string, dims ...int) error {
	n, err := tensor.CheckSize(op, arg, dims...)
	if err == nil && n > tensor.MaxHostBytes {
		err = tensor.Errorf(tensor.ErrShape, op, arg, "%v is %d pixel values, more than tensor.MaxHostBytes (%d)", dims, n, tensor.MaxHostBytes)
	}
	return err
}

// PatchGrid is the deterministic core of patch blackening: given the uniform draws the
// reference consumes (one per patch, row-major: patch row outer, patch column inner), it marks
// patch i black when draws[i] < prob. len(draws) must be rows*cols of GridSize(h, w, patchSize).
func PatchGrid(h, w, patchSize int, prob float64, draws []float64) (Grid, error) {
	const op = "perturb.PatchGrid"
	if err := checkBlackening(op, "patchSize", patchSize, "prob", prob); err != nil {
		return Grid{}, err
	}
	if err := checkPixels(op, "h, w", h, w); err != nil {
		return Grid{}, err
	}
	rows, cols := GridSize(h, w, patchSize)
	if len(draws) != rows*cols {
		return Grid{}, tensor.Errorf(tensor.ErrShape, op, "draws", "has %d values, a %d×%d image in %d-pixel patches has %d×%d patches", len(draws), h, w, patchSize, rows, cols)
	}
	g := Grid{Rows: rows, Cols: cols, Black: make([]bool, len(draws))}
	for i, d := range draws {
		g.Black[i] = d < prob
	}
	return g, nil
}

// checkBlackening validates a patch size and probability; the names label them in errors
// (argument names for functions, field names for Blackening's methods).
func checkBlackening(op, sizeName string, patchSize int, probName string, prob float64) error {
	if patchSize <= 0 {
		return tensor.Errorf(tensor.ErrParam, op, sizeName, "is %d, want > 0", patchSize)
	}
	return tensor.CheckUnit(op, probName, prob)
}

func (b Blackening) validate(op string) error {
	if b.PatchSize == 0 {
		return tensor.Errorf(tensor.ErrParam, op, "PatchSize", "is 0, want > 0 (perturb.DefaultBlackening gives %d)", DefaultPatchSize)
	}
	return checkBlackening(op, "PatchSize", b.PatchSize, "Prob", b.Prob)
}

// BlackenPatches copies the image src ([H, W] or [H, W, C], uint8) into dst and sets every
// channel of each patch that grid marks black to 0. Patches are patchSize×patchSize squares
// from the top-left corner; those at the right and bottom edges are cut to the image. dst may
// be src. The grid must have GridSize(H, W, patchSize) rows and columns.
func BlackenPatches(dst, src *tensor.Tensor, grid Grid, patchSize int) error {
	const op = "perturb.BlackenPatches"
	if patchSize <= 0 {
		return tensor.Errorf(tensor.ErrParam, op, "patchSize", "is %d, want > 0", patchSize)
	}
	_, g, err := checkImages(op, dst, src, false)
	if err != nil {
		return err
	}
	rows, cols := GridSize(g.h, g.w, patchSize)
	if grid.Rows != rows || grid.Cols != cols || len(grid.Black) != rows*cols {
		return tensor.Errorf(tensor.ErrShape, op, "grid", "is %d×%d with %d cells, a %d×%d image in %d-pixel patches needs %d×%d", grid.Rows, grid.Cols, len(grid.Black), g.h, g.w, patchSize, rows, cols)
	}
	return run(op, dst, src, false, nil, 0, func(d, s []uint8, g geom, _ uint64) {
		blacken(d, s, g, patchSize, func(i int) bool { return grid.Black[i] })
	})
}

// blacken copies s to d and zeroes patch i (row-major index) when black(i); black is called
// once per patch, in row-major order.
func blacken(d, s []uint8, g geom, ps int, black func(i int) bool) {
	copy(d, s)
	rowLen := g.w * g.c
	i := 0
	for y0 := 0; y0 < g.h; y0 += ps {
		y1 := min(y0+ps, g.h)
		for x0 := 0; x0 < g.w; x0 += ps {
			if black(i) {
				x1 := min(x0+ps, g.w)
				for y := y0; y < y1; y++ {
					clear(d[y*rowLen+x0*g.c : y*rowLen+x1*g.c])
				}
			}
			i++
		}
	}
}

// Blackening is the VPPO perturbation: split the image into PatchSize×PatchSize patches
// (row-major, partial at the edges) and blacken each independently with probability Prob.
// The zero value is invalid (patch size 0); use DefaultBlackening for the reference's 14 / 0.5.
//
// The reference draws from numpy's global RandomState; mtrl draws one float64 per patch, in the
// reference's row-major order, from rand.New(rand.NewPCG(seed, sampleID)) (math/rand/v2), so the
// perturbation of a sample depends only on (seed, sample id). To replay recorded numpy draws
// use PatchGrid and BlackenPatches.
type Blackening struct {
	PatchSize int     `json:"patch_size" yaml:"patch_size"`
	Prob      float64 `json:"black_prob" yaml:"black_prob"`
}

// DefaultBlackening returns Blackening{PatchSize: 14, Prob: 0.5}, the reference pipeline's call.
func DefaultBlackening() Blackening {
	return Blackening{PatchSize: DefaultPatchSize, Prob: DefaultBlackProb}
}

// Kind returns PatchBlackening.
func (Blackening) Kind() Kind { return PatchBlackening }

// Validate checks PatchSize > 0 and Prob in [0, 1].
func (b Blackening) Validate() error {
	return b.validate("perturb.Blackening.Validate")
}

// Grid returns the patches the seeded Apply blackens in an h×w image for (seed, sampleID).
func (b Blackening) Grid(h, w int, seed, sampleID uint64) (Grid, error) {
	if err := b.validate("perturb.Blackening.Grid"); err != nil {
		return Grid{}, err
	}
	if err := checkPixels("perturb.Blackening.Grid", "h, w", h, w); err != nil {
		return Grid{}, err
	}
	rows, cols := GridSize(h, w, b.PatchSize)
	r := rand.New(rand.NewPCG(seed, sampleID))
	g := Grid{Rows: rows, Cols: cols, Black: make([]bool, rows*cols)}
	for i := range g.Black {
		g.Black[i] = r.Float64() < b.Prob
	}
	return g, nil
}

// Apply blackens patches of one image [H, W] or [H, W, C] for (seed, sampleID).
func (b Blackening) Apply(dst, src *tensor.Tensor, seed, sampleID uint64) error {
	const op = "perturb.Blackening.Apply"
	if err := b.validate(op); err != nil {
		return err
	}
	return run(op, dst, src, false, nil, sampleID, b.kernel(seed))
}

// ApplyBatch blackens patches of each image of a batch [N, H, W] or [N, H, W, C]; image i uses
// (seed, ids[i]). Images are processed in parallel.
func (b Blackening) ApplyBatch(dst, src *tensor.Tensor, seed uint64, ids []uint64) error {
	const op = "perturb.Blackening.ApplyBatch"
	if err := b.validate(op); err != nil {
		return err
	}
	if ok, err := b.batchKernel(op, dst, src, seed, ids); ok {
		return err
	}
	return run(op, dst, src, true, ids, 0, b.kernel(seed))
}

func (b Blackening) kernel(seed uint64) func(d, s []uint8, g geom, id uint64) {
	// Compare 53-bit draws with prob as float64, like numpy's rand() < black_prob.
	prob := b.Prob
	return func(d, s []uint8, g geom, id uint64) {
		r := rand.New(rand.NewPCG(seed, id))
		blacken(d, s, g, b.PatchSize, func(int) bool { return r.Float64() < prob })
	}
}
