package vqa

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"math/rand/v2"
	"slices"
	"strings"
)

// TaskConfig sizes the generated task.
type TaskConfig struct {
	ImageSize int // square images, ImageSize x ImageSize pixels, 8..512 (default 32)
	MaxShapes int // shapes per image are 1..MaxShapes, at most 4 (one per grid cell; default 3)
	Options   int // answer options per question, 2..10 (letters A..J; default 4)
	// OrderedOptions lists the options in the value list's order (Colours(), Shapes(), numbers,
	// Positions()) instead of shuffled: which letter names a value then follows from the other
	// options alone, so choosing the letter is easy and the visual fact decides the answer.
	OrderedOptions bool
	// Chain is the style of the reference responses: ShortChain (the default) or
	// ReasoningChain, whose visual fact sits among image-independent text. Scene, question and
	// options do not depend on it.
	Chain ChainStyle
}

// DefaultTaskConfig returns the default generated task: 32-pixel images, 1..3 shapes, 4
// options listed in the value lists' order (the example trainer's default too: with shuffled
// options its small model's accuracy is limited by mapping a value to its letter, not by
// perception).
func DefaultTaskConfig() TaskConfig {
	return TaskConfig{ImageSize: 32, MaxShapes: 3, Options: 4, OrderedOptions: true}
}

// Validate reports the first invalid field of c.
func (c TaskConfig) Validate() error {
	switch {
	case c.ImageSize < 8 || c.ImageSize > 512:
		return fmt.Errorf("vqa: TaskConfig.ImageSize must be in [8, 512], got %d", c.ImageSize)
	case c.MaxShapes < 1 || c.MaxShapes > len(positions):
		return fmt.Errorf("vqa: TaskConfig.MaxShapes must be in [1, %d], got %d", len(positions), c.MaxShapes)
	case c.Options < 2 || c.Options > len(letters):
		return fmt.Errorf("vqa: TaskConfig.Options must be in [2, %d], got %d", len(letters), c.Options)
	case !chainStyles.Valid(c.Chain):
		return fmt.Errorf("vqa: TaskConfig.Chain must be ShortChain or ReasoningChain, got %v", c.Chain)
	}
	return nil
}

// Object is one shape of a scene. Its fields are vocabulary words: Colour one
// of Colours(), Shape one of Shapes(), Position one of Positions() (two words,
// e.g. "top left").
type Object struct {
	Shape    string `json:"shape" parquet:"shape"`
	Colour   string `json:"colour" parquet:"colour"`
	Position string `json:"position" parquet:"position"`
}

// Sample is one question about one image.
type Sample struct {
	ID       uint64
	Image    image.Image // ImageSize x ImageSize RGB (an *image.RGBA when generated)
	Objects  []Object    // the scene drawn in Image: distinct shapes, colours and positions
	Prompt   string      // question + lettered options, e.g. "what colour is the circle ? A red B green C blue D yellow"
	Answer   string      // the correct letter, e.g. "C"
	Response string      // the reference chain, e.g. "<think> the circle is blue </think> Answer: C"
	// IgnoredVideos counts the videos a loaded row listed and the loader skipped
	// (LoadOptions.IgnoreVideos); 0 for generated samples.
	IgnoredVideos int
}

// Colours, Shapes and Positions return copies of the task's value lists.
func Colours() []string   { return append([]string(nil), colours...) }
func Shapes() []string    { return append([]string(nil), shapes...) }
func Positions() []string { return append([]string(nil), positions...) }

// Letters returns the option letters A..J.
func Letters() []string { return append([]string(nil), letters...) }

// Background is the plain background colour of every image (black).
var Background = color.RGBA{0, 0, 0, 255}

// palette holds the RGB of each colour in colours order.
var palette = []color.RGBA{
	{220, 40, 40, 255},   // red
	{40, 180, 60, 255},   // green
	{50, 80, 230, 255},   // blue
	{240, 220, 40, 255},  // yellow
	{140, 60, 200, 255},  // purple
	{250, 140, 20, 255},  // orange
	{240, 240, 240, 255}, // white
	{40, 210, 220, 255},  // cyan
	{250, 130, 190, 255}, // pink
	{130, 80, 30, 255},   // brown
}

// QuestionKind is the type of a question.
type QuestionKind int

const (
	ColourOfShape    QuestionKind = iota // "what colour is the circle ?" → a colour
	ShapeOfColour                        // "what shape is red ?" → a shape
	CountShapes                          // "how many shapes are there ?" → a number
	PositionOfShape                      // "where is the circle ?" → a position
	PositionOfColour                     // "where is the red shape ?" → a position
	numKinds
)

var kindNames = []string{"colour_of_shape", "shape_of_colour", "count", "position_of_shape", "position_of_colour"}

// String returns the kind's snake_case name.
func (k QuestionKind) String() string {
	if k < 0 || k >= numKinds {
		return fmt.Sprintf("QuestionKind(%d)", int(k))
	}
	return kindNames[k]
}

// countDomain is the list of number words offered as options of a count
// question: one..max(Options, MaxShapes) so that every option is plausible
// without the image, or zero..nine when that needs more than nine values.
func countDomain(cfg TaskConfig) []string {
	n := max(cfg.Options, cfg.MaxShapes)
	if n > 9 {
		return numbers
	}
	return numbers[1 : n+1]
}

// domain returns the answer values of a kind.
func domain(cfg TaskConfig, k QuestionKind) []string {
	switch k {
	case ColourOfShape:
		return colours
	case ShapeOfColour:
		return shapes
	case CountShapes:
		return countDomain(cfg)
	default:
		return positions
	}
}

// Generate makes n samples with ids firstID..firstID+n-1; sample i depends
// only on (cfg, seed, firstID+i) (a PCG stream seeded with (seed, id)). It
// panics only if cfg is invalid (call cfg.Validate first) or n < 0.
func Generate(cfg TaskConfig, seed uint64, firstID uint64, n int) []Sample {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	out := make([]Sample, n)
	for i := range out {
		out[i] = generateOne(cfg, seed, firstID+uint64(i))
	}
	return out
}

func generateOne(cfg TaskConfig, seed, id uint64) Sample {
	r := rand.New(rand.NewPCG(seed, id))
	k := 1 + r.IntN(cfg.MaxShapes)
	shapePerm := r.Perm(len(shapes))
	colourPerm := r.Perm(len(colours))
	posPerm := r.Perm(len(positions))
	objs := make([]Object, k)
	for i := range objs {
		objs[i] = Object{Shape: shapes[shapePerm[i]], Colour: colours[colourPerm[i]], Position: positions[posPerm[i]]}
	}
	// Question kinds whose answer domain has at least Options values.
	var kinds []QuestionKind
	for q := QuestionKind(0); q < numKinds; q++ {
		if len(domain(cfg, q)) >= cfg.Options {
			kinds = append(kinds, q)
		}
	}
	kind := kinds[r.IntN(len(kinds))]
	o := objs[r.IntN(k)] // the object asked about
	var question, think, correct string
	switch kind {
	case ColourOfShape:
		question = "what colour is the " + o.Shape + " ?"
		think = "the " + o.Shape + " is " + o.Colour
		correct = o.Colour
	case ShapeOfColour:
		question = "what shape is " + o.Colour + " ?"
		think = "the " + o.Colour + " shape is a " + o.Shape
		correct = o.Shape
	case CountShapes:
		question = "how many shapes are there ?"
		if k == 1 {
			think = "there is one shape"
		} else {
			think = "there are " + numbers[k] + " shapes"
		}
		correct = numbers[k]
	case PositionOfShape:
		question = "where is the " + o.Shape + " ?"
		think = "the " + o.Shape + " is at the " + o.Position
		correct = o.Position
	case PositionOfColour:
		question = "where is the " + o.Colour + " shape ?"
		think = "the " + o.Colour + " shape is at the " + o.Position
		correct = o.Position
	}
	// Options: the correct value and Options-1 distinct distractors, shuffled.
	dom := domain(cfg, kind)
	var others []string
	for _, v := range dom {
		if v != correct {
			others = append(others, v)
		}
	}
	r.Shuffle(len(others), func(i, j int) { others[i], others[j] = others[j], others[i] })
	opts := append(others[:cfg.Options-1:cfg.Options-1], correct)
	r.Shuffle(len(opts), func(i, j int) { opts[i], opts[j] = opts[j], opts[i] })
	if cfg.OrderedOptions {
		slices.SortFunc(opts, func(a, b string) int { return indexOf(dom, a) - indexOf(dom, b) })
	}
	var answer string
	var b strings.Builder
	b.WriteString(question)
	for i, v := range opts {
		b.WriteString(" " + letters[i] + " " + v)
		if v == correct {
			answer = letters[i]
		}
	}
	response := "<think> " + think + " </think> Answer: " + answer
	if cfg.Chain == ReasoningChain {
		response = reasoningResponse(r, question, think, correct, answer)
	}
	return Sample{
		ID:       id,
		Image:    Render(cfg.ImageSize, objs),
		Objects:  objs,
		Prompt:   b.String(),
		Answer:   answer,
		Response: response,
	}
}

// Render draws objects on a size x size image with the plain Background: the
// image is a 2x2 grid and each object is drawn centred in its cell. Unknown
// shape, colour or position words are skipped.
func Render(size int, objects []Object) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, size, size))
	draw.Draw(img, img.Bounds(), &image.Uniform{C: Background}, image.Point{}, draw.Src)
	cell := float64(size) / 2
	for _, o := range objects {
		ci, cs, cp := indexOf(colours, o.Colour), indexOf(shapes, o.Shape), indexOf(positions, o.Position)
		if ci < 0 || cs < 0 || cp < 0 {
			continue
		}
		col := palette[ci]
		x0, y0 := float64(cp%2)*cell, float64(cp/2)*cell
		cx, cy := x0+cell/2, y0+cell/2
		r := cell * 0.38 // half-extent of the shape
		for py := int(y0); py < int(y0+cell) && py < size; py++ {
			for px := int(x0); px < int(x0+cell) && px < size; px++ {
				// pixel centre relative to the cell centre, in units of r
				dx, dy := (float64(px)+0.5-cx)/r, (float64(py)+0.5-cy)/r
				if inside(o.Shape, dx, dy, r) {
					img.SetRGBA(px, py, col)
				}
			}
		}
	}
	return img
}

// inside reports whether the point (dx, dy) (y down, unit = half-extent r
// pixels) lies in the shape.
func inside(shape string, dx, dy, r float64) bool {
	switch shape {
	case "circle":
		return dx*dx+dy*dy <= 1
	case "square":
		return dx >= -0.85 && dx <= 0.85 && dy >= -0.85 && dy <= 0.85
	case "triangle": // apex up, base at dy = 1
		if dy < -1 || dy > 1 {
			return false
		}
		half := (dy + 1) / 2 // 0 at the apex, 1 at the base
		return dx >= -half && dx <= half
	case "cross":
		w := max(0.3, 0.6/r) // arms at least ~1 pixel wide on tiny images
		return (dx >= -w && dx <= w && dy >= -1 && dy <= 1) || (dy >= -w && dy <= w && dx >= -1 && dx <= 1)
	case "diamond":
		return abs(dx)+abs(dy) <= 1
	}
	return false
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

func indexOf(list []string, w string) int {
	for i, v := range list {
		if v == w {
			return i
		}
	}
	return -1
}

// Pixels returns img as interleaved RGB bytes in [H, W, 3] row-major order
// (alpha dropped), the layout of the model's Uint8 image tensor.
func Pixels(img image.Image) []uint8 {
	b := img.Bounds()
	out := make([]uint8, 0, b.Dx()*b.Dy()*3)
	if rgba, ok := img.(*image.RGBA); ok {
		for y := b.Min.Y; y < b.Max.Y; y++ {
			row := rgba.Pix[rgba.PixOffset(b.Min.X, y):]
			for x := 0; x < b.Dx(); x++ {
				out = append(out, row[4*x], row[4*x+1], row[4*x+2])
			}
		}
		return out
	}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
			out = append(out, c.R, c.G, c.B)
		}
	}
	return out
}

// Options returns the (letter, value) pairs of a generated prompt: the words after " ? ", a
// letter A..J followed by its value (one or two words). ok is false when the prompt has no such
// list.
func Options(prompt string) (opts [][2]string, ok bool) {
	q := strings.Index(prompt, " ? ")
	if q < 0 {
		return nil, false
	}
	for _, w := range strings.Fields(prompt[q+3:]) {
		if len(w) == 1 && w[0] >= 'A' && w[0] <= 'J' {
			opts = append(opts, [2]string{w, ""})
			continue
		}
		if len(opts) == 0 {
			return nil, false
		}
		o := &opts[len(opts)-1]
		o[1] = strings.TrimSpace(o[1] + " " + w)
	}
	return opts, len(opts) > 0
}

// BlindResponse returns s's reference chain with its visual fact replaced by the value of option
// letter (and the answer by that letter): the same template and a consistent answer, but a fact
// that need not be true of the image. A warm start on blind responses teaches the format and
// how a value maps to its letter without teaching what the image shows. ok is false when s is
// not a generated sample (no options, or a chain that does not state the answer's value).
func BlindResponse(s Sample, letter string) (string, bool) {
	opts, ok := Options(s.Prompt)
	if !ok {
		return "", false
	}
	var correct, value string
	for _, o := range opts {
		if o[0] == s.Answer {
			correct = o[1]
		}
		if o[0] == letter {
			value = o[1]
		}
	}
	end := strings.Index(s.Response, " </think>")
	if correct == "" || value == "" || end < 0 {
		return "", false
	}
	think := s.Response[:end]
	switch {
	case correct == value:
	case strings.HasSuffix(think, "there is one shape"):
		think = strings.TrimSuffix(think, "there is one shape") + "there are " + value + " shapes"
	case strings.HasSuffix(think, "there are "+correct+" shapes"):
		if value == "one" {
			think = strings.TrimSuffix(think, "there are "+correct+" shapes") + "there is one shape"
		} else {
			think = strings.TrimSuffix(think, correct+" shapes") + value + " shapes"
		}
	case strings.HasSuffix(think, " "+correct):
		think = strings.TrimSuffix(think, correct) + value
	case strings.Contains(think, " "+correct+" "):
		i := strings.LastIndex(think, " "+correct+" ")
		think = think[:i+1] + value + think[i+1+len(correct):]
	default:
		return "", false
	}
	return think + " </think> Answer: " + letter, true
}
