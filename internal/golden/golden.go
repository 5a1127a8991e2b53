// Package golden loads the reference test vectors (JSON files, one op and its cases each, in
// ../shared/golden or $MTRL_GOLDEN_DIR) and compares results against them with the file's
// tolerances. It is test support, not API.
package golden

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

// File is one *.json file: an op and its cases.
type File struct {
	Op    string  `json:"op"`
	Cases []*Case `json:"cases"`
	Path  string  `json:"-"`
}

// Case is one test case. Handlers read inputs and params through its accessors and report
// results through Check*, which record every output compared so the runner can fail a case
// whose outputs were not all checked.
type Case struct {
	Name    string            `json:"name"`
	Source  string            `json:"source"`
	Params  map[string]any    `json:"params"`
	Inputs  map[string]*Array `json:"inputs"`
	Outputs map[string]*Array `json:"outputs"`
	Tol     struct {
		RTol float64 `json:"rtol"`
		ATol float64 `json:"atol"`
	} `json:"tol"`
	Note  string `json:"note"`
	Error string `json:"error"`

	T *testing.T `json:"-"`
	// Backend is where F32, I32, U8 and New put tensors (nil: the CPU backend), so one handler
	// checks any backend; Check copies device results back to the host.
	Backend tensor.Backend  `json:"-"`
	checked map[string]bool // outputs compared so far
}

// Array is a tensor as stored in the JSON: values widened to float64 (int64 and bool too).
type Array struct {
	Shape []int
	DType string
	Data  []float64
}

// UnmarshalJSON decodes {"shape", "dtype", "data"} with "NaN"/"Infinity"/"-Infinity" strings.
func (a *Array) UnmarshalJSON(b []byte) error {
	var raw struct {
		Shape []int             `json:"shape"`
		DType string            `json:"dtype"`
		Data  []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	a.Shape, a.DType = raw.Shape, raw.DType
	if a.Shape == nil {
		a.Shape = []int{}
	}
	a.Data = make([]float64, len(raw.Data))
	for i, r := range raw.Data {
		switch s := string(r); s {
		case `"NaN"`:
			a.Data[i] = math.NaN()
		case `"Infinity"`:
			a.Data[i] = math.Inf(1)
		case `"-Infinity"`:
			a.Data[i] = math.Inf(-1)
		case "true":
			a.Data[i] = 1
		case "false":
			a.Data[i] = 0
		default:
			if err := json.Unmarshal(r, &a.Data[i]); err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
		}
	}
	if n := tensor.Shape(a.Shape).NumElements(); n != len(a.Data) {
		return fmt.Errorf("shape %v needs %d elements, data has %d", a.Shape, n, len(a.Data))
	}
	return nil
}

// Load reads every *.json in dir, sorted by name.
func Load(dir string) ([]*File, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var files []*File
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		f := &File{Path: p}
		if err := json.Unmarshal(b, f); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		files = append(files, f)
	}
	return files, nil
}

// Begin prepares the case for a handler run under t.
func (c *Case) Begin(t *testing.T) { c.T, c.checked = t, map[string]bool{} }

// Unchecked lists outputs no Check call compared, sorted.
func (c *Case) Unchecked() []string {
	var out []string
	for k := range c.Outputs {
		if !c.checked[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// --- params ---

// Has reports whether a param is present.
func (c *Case) Has(name string) bool { _, ok := c.Params[name]; return ok }

func (c *Case) param(name string) any {
	v, ok := c.Params[name]
	if !ok {
		c.T.Fatalf("case %s has no param %q", c.Name, name)
	}
	return v
}

// Float returns a numeric param.
func (c *Case) Float(name string) float64 {
	switch v := c.param(name).(type) {
	case float64:
		return v
	case string: // non-finite numbers are strings
		var a Array
		if err := a.UnmarshalJSON([]byte(fmt.Sprintf(`{"shape":[],"data":[%q]}`, v))); err == nil {
			return a.Data[0]
		}
	}
	c.T.Fatalf("param %q = %v is not a number", name, c.Params[name])
	return 0
}

// FloatOr returns a numeric param, or def when absent.
func (c *Case) FloatOr(name string, def float64) float64 {
	if !c.Has(name) || c.Params[name] == nil {
		return def
	}
	return c.Float(name)
}

// Int returns an integer param.
func (c *Case) Int(name string) int { return int(c.Float(name)) }

// String returns a string param.
func (c *Case) String(name string) string {
	s, ok := c.param(name).(string)
	if !ok {
		c.T.Fatalf("param %q = %v is not a string", name, c.Params[name])
	}
	return s
}

// Bool returns a boolean param.
func (c *Case) Bool(name string) bool {
	b, ok := c.param(name).(bool)
	if !ok {
		c.T.Fatalf("param %q = %v is not a bool", name, c.Params[name])
	}
	return b
}

// --- inputs ---

// In returns an input array; the case fails if it is missing.
func (c *Case) In(name string) *Array {
	a, ok := c.Inputs[name]
	if !ok {
		c.T.Fatalf("case %s has no input %q", c.Name, name)
	}
	return a
}

// HasIn reports whether an input is present.
func (c *Case) HasIn(name string) bool { _, ok := c.Inputs[name]; return ok }

// F32 returns input name as a float32 tensor on the case's backend (masks and ids are
// converted to float32).
func (c *Case) F32(name string) *tensor.Tensor { return c.on(c.In(name).F32Tensor()) }

// I32 returns input name as an int32 tensor on the case's backend.
func (c *Case) I32(name string) *tensor.Tensor { return c.on(c.In(name).I32Tensor()) }

// U8 returns input name as a uint8 tensor on the case's backend.
func (c *Case) U8(name string) *tensor.Tensor { return c.on(c.In(name).U8Tensor()) }

// New returns a zero tensor on the case's backend.
func (c *Case) New(dtype tensor.DType, shape ...int) *tensor.Tensor {
	t, err := tensor.New(c.backend(), dtype, shape...)
	if err != nil {
		c.T.Fatalf("%s: %v", c.Name, err)
	}
	return t
}

// Host returns the values of float32 tensor t in host memory (for handlers that post-process
// results).
func (c *Case) Host(t *tensor.Tensor) []float32 {
	h, err := tensor.To(tensor.CPU(), t)
	if err != nil {
		c.T.Fatalf("%s: %v", c.Name, err)
	}
	v, err := h.Float32s()
	if err != nil {
		c.T.Fatalf("%s: %v", c.Name, err)
	}
	return v
}

func (c *Case) backend() tensor.Backend {
	if c.Backend == nil {
		return tensor.CPU()
	}
	return c.Backend
}

func (c *Case) on(h *tensor.Tensor) *tensor.Tensor {
	if c.Backend == nil || c.Backend == tensor.CPU() {
		return h
	}
	d, err := tensor.To(c.Backend, h)
	if err != nil {
		c.T.Fatalf("%s: copy to %s: %v", c.Name, c.Backend.Name(), err)
	}
	return d
}

// Float32s converts the data to float32.
func (a *Array) Float32s() []float32 {
	out := make([]float32, len(a.Data))
	for i, v := range a.Data {
		out[i] = float32(v)
	}
	return out
}

// F32Tensor returns the array as a float32 CPU tensor.
func (a *Array) F32Tensor() *tensor.Tensor {
	return tensor.Must(tensor.FromFloat32(a.Float32s(), a.Shape...))
}

// I32Tensor returns the array as an int32 CPU tensor.
func (a *Array) I32Tensor() *tensor.Tensor {
	out := make([]int32, len(a.Data))
	for i, v := range a.Data {
		out[i] = int32(v)
	}
	return tensor.Must(tensor.FromInt32(out, a.Shape...))
}

// U8Tensor returns the array as a uint8 CPU tensor.
func (a *Array) U8Tensor() *tensor.Tensor {
	out := make([]uint8, len(a.Data))
	for i, v := range a.Data {
		out[i] = uint8(v)
	}
	return tensor.Must(tensor.FromUint8(out, a.Shape...))
}

// --- outputs ---

// HasOut reports whether the case expects output name.
func (c *Case) HasOut(name string) bool { _, ok := c.Outputs[name]; return ok }

// Check compares got (float32/float64/int slices, a scalar, or a *tensor.Tensor on any backend) with
// output name under the case's tolerance (exact for int64, bool and uint8 outputs).
func (c *Case) Check(name string, got any) {
	c.T.Helper()
	want, ok := c.Outputs[name]
	if !ok {
		c.T.Errorf("%s: produced output %q that the case does not expect", c.Name, name)
		return
	}
	c.checked[name] = true
	g, err := toFloat64s(got)
	if err != nil {
		c.T.Errorf("%s: output %q: %v", c.Name, name, err)
		return
	}
	if len(g) != len(want.Data) {
		c.T.Errorf("%s: output %q has %d elements, want %d (shape %v)", c.Name, name, len(g), len(want.Data), want.Shape)
		return
	}
	exact := want.DType == "int64" || want.DType == "bool" || want.DType == "uint8"
	bad := 0
	for i, w := range want.Data {
		if match(g[i], w, c.Tol.RTol, c.Tol.ATol, exact) {
			continue
		}
		if bad < 5 {
			c.T.Errorf("%s: output %q[%d] = %.9g, want %.9g (rtol %g, atol %g)", c.Name, name, i, g[i], w, c.Tol.RTol, c.Tol.ATol)
		}
		bad++
	}
	if bad > 5 {
		c.T.Errorf("%s: output %q: %d of %d elements differ", c.Name, name, bad, len(g))
	}
}

// CheckMetrics compares metrics (keys without the "metric:" prefix) with the case's metric
// outputs: every expected metric must be present in got and every key of got that the case
// lists must match. Keys in got that the case does not list are reported unless listed in
// optional (metrics the reference logs only under conditions these inputs do not meet).
func (c *Case) CheckMetrics(got map[string][]float64, optional ...string) {
	c.T.Helper()
	for name := range c.Outputs {
		key, ok := strings.CutPrefix(name, "metric:")
		if !ok {
			continue
		}
		v, ok := got[key]
		if !ok {
			c.T.Errorf("%s: metric %q expected but not produced", c.Name, key)
			c.checked[name] = true
			continue
		}
		c.Check(name, v)
	}
	for key := range got {
		if !c.HasOut("metric:"+key) && !slices.Contains(optional, key) {
			c.T.Errorf("%s: produced metric %q that the reference did not log here", c.Name, key)
		}
	}
}

func match(g, w, rtol, atol float64, exact bool) bool {
	switch {
	case math.IsNaN(w):
		return math.IsNaN(g)
	case math.IsInf(w, 0):
		return g == w
	case exact:
		return g == w
	}
	return math.Abs(g-w) <= atol+rtol*math.Abs(w)
}

func toFloat64s(got any) ([]float64, error) {
	switch v := got.(type) {
	case []float64:
		return v, nil
	case []float32:
		return conv(v), nil
	case []int32:
		return conv(v), nil
	case []int:
		return conv(v), nil
	case []int64:
		return conv(v), nil
	case []uint8:
		return conv(v), nil
	case []bool:
		out := make([]float64, len(v))
		for i, b := range v {
			if b {
				out[i] = 1
			}
		}
		return out, nil
	case float64:
		return []float64{v}, nil
	case float32:
		return []float64{float64(v)}, nil
	case int:
		return []float64{float64(v)}, nil
	case bool:
		return toFloat64s([]bool{v})
	case *tensor.Tensor:
		h, err := tensor.To(tensor.CPU(), v)
		if err != nil {
			return nil, err
		}
		switch h.DType() {
		case tensor.Float32:
			f, _ := h.Float32s()
			return conv(f), nil
		case tensor.Int32:
			f, _ := h.Int32s()
			return conv(f), nil
		case tensor.Uint8:
			f, _ := h.Uint8s()
			return conv(f), nil
		case tensor.BFloat16:
			f, _ := h.BF16s()
			out := make([]float64, len(f))
			for i, x := range f {
				out[i] = float64(x.Float32())
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("cannot compare a %T", got)
}

func conv[T float32 | int32 | int | int64 | uint8](v []T) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// Accepted is returned by a handler for an error case whose inputs mtrl deliberately accepts
// (the vectors allow this where the correct semantics accept them); Reason says why.
type Accepted struct{ Reason string }

func (a Accepted) Error() string { return "accepted by design: " + a.Reason }
