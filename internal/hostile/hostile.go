// Package hostile calls a package's exported functions with hostile arguments — nil and
// zero-value tensors, wrong shapes, dtypes and backends, empty dimensions, sizes that overflow
// int, NaN and ±Inf, out-of-range parameters — and fails the test on any panic. Each package's
// hostile_test.go lists its exported functions and methods; Covered parses the package's
// source and fails when one is missing from the list, so a new function cannot escape it.
//
// Arguments come from per-type candidate lists: what the test registers for a type (plausible
// values, tried first) followed by the built-in hostile values of its kind. A function is
// called with every candidate of one parameter at a time (the others at their first
// candidate), then with random combinations.
package hostile

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

// gen makes one fresh argument (tensors are made anew for every call, so an op that writes
// its output cannot change the next call's input).
type gen struct {
	desc string
	make func() reflect.Value
}

// Values holds the candidate arguments by type.
type Values struct {
	extra map[reflect.Type][]gen
}

// NewValues returns candidate lists with only the built-in hostile values.
func NewValues() *Values { return &Values{extra: map[reflect.Type][]gen{}} }

// Add registers plausible values, tried before the built-in ones of their type. Slices and
// maps are copied for every call (a function may write into them); a struct holding tensors
// is reused as it is: register those with Gen when the function writes into them.
func (v *Values) Add(xs ...any) {
	for _, x := range xs {
		rv := reflect.ValueOf(x)
		v.extra[rv.Type()] = append(v.extra[rv.Type()], gen{describe(rv), func() reflect.Value { return shallowCopy(rv) }})
	}
}

// shallowCopy returns a copy of a slice or map's elements, or rv itself.
func shallowCopy(rv reflect.Value) reflect.Value {
	switch {
	case rv.Kind() == reflect.Slice && !rv.IsNil():
		c := reflect.MakeSlice(rv.Type(), rv.Len(), rv.Len())
		reflect.Copy(c, rv)
		return c
	case rv.Kind() == reflect.Map && !rv.IsNil():
		c := reflect.MakeMap(rv.Type())
		for it := rv.MapRange(); it.Next(); {
			c.SetMapIndex(it.Key(), it.Value())
		}
		return c
	}
	return rv
}

// AddAs registers x as a value of interface type T (for example a tensor.Backend), which Add
// cannot infer from x alone.
func AddAs[T any](v *Values, xs ...T) {
	typ := reflect.TypeFor[T]()
	for _, x := range xs {
		rv := reflect.ValueOf(&x).Elem()
		v.extra[typ] = append(v.extra[typ], gen{describe(rv), func() reflect.Value { return rv }})
	}
}

// Gen registers a generator of fresh values of type T, tried before the built-in ones.
func Gen[T any](v *Values, desc string, f func() T) {
	typ := reflect.TypeFor[T]()
	v.extra[typ] = append(v.extra[typ], gen{desc, func() reflect.Value {
		x := f()
		return reflect.ValueOf(&x).Elem()
	}})
}

// candidates lists the values tried for type typ; depth limits the recursion into struct
// fields, pointers and slices.
func (v *Values) candidates(typ reflect.Type, depth int) []gen {
	out := append([]gen(nil), v.extra[typ]...)
	return append(out, v.builtin(typ, depth)...)
}

func constant(rv reflect.Value) gen {
	return gen{describe(rv), func() reflect.Value { return rv }}
}

func consts[T any](typ reflect.Type, xs ...T) []gen {
	out := make([]gen, len(xs))
	for i, x := range xs {
		rv := reflect.ValueOf(x).Convert(typ)
		out[i] = constant(rv)
	}
	return out
}

// The built-in scalars: small values first (so the base call is plausible), then the
// boundaries. Sizes stay either tiny or far beyond any allocation (or overflowing), so a
// call never allocates gigabytes.
var (
	hostileInts   = []int64{2, 0, 1, 3, -1, -7, math.MinInt64, math.MaxInt64, math.MaxInt64 - 1, 1<<62 + 1, 1 << 62, 1<<48 + 3}
	hostileInt32s = []int64{1, 0, 2, -1, math.MaxInt32, math.MinInt32}
	hostileUints  = []uint64{1, 0, 2, math.MaxUint64, math.MaxUint64 - 1}
	hostileFloats = []float64{1, 0.5, 0, -1, 2, math.NaN(), math.Inf(1), math.Inf(-1), math.MaxFloat64, math.SmallestNonzeroFloat64, math.Copysign(0, -1), -1e30, 1e-3}
)

func (v *Values) builtin(typ reflect.Type, depth int) []gen {
	if typ == reflect.TypeFor[*tensor.Tensor]() {
		return tensors()
	}
	switch typ.Kind() {
	case reflect.Bool:
		return consts(typ, false, true)
	case reflect.Int, reflect.Int64:
		return consts(typ, hostileInts...)
	case reflect.Int32:
		return consts(typ, hostileInt32s...)
	case reflect.Int8, reflect.Int16:
		return consts(typ, int64(1), 0, -1, 127)
	case reflect.Uint8, reflect.Uint16:
		return consts(typ, uint64(1), 0, 2, 3, 4, 5, 255)
	case reflect.Uint, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return consts(typ, hostileUints...)
	case reflect.Float32, reflect.Float64:
		return consts(typ, hostileFloats...)
	case reflect.String:
		return consts(typ, "x", "", "float32", "\xff\xfe", strings.Repeat("z", 300))
	case reflect.Slice:
		return v.slices(typ, depth)
	case reflect.Map:
		return []gen{constant(reflect.Zero(typ)), {"empty map", func() reflect.Value { return reflect.MakeMap(typ) }}}
	case reflect.Pointer:
		out := []gen{constant(reflect.Zero(typ))}
		if depth > 0 {
			for _, g := range v.candidates(typ.Elem(), depth-1) {
				out = append(out, gen{"&" + g.desc, func() reflect.Value {
					p := reflect.New(typ.Elem())
					p.Elem().Set(g.make())
					return p
				}})
			}
		}
		return out
	case reflect.Struct:
		return v.structs(typ, depth)
	}
	// Interfaces, funcs, channels, arrays: the zero value (nil) besides what was registered.
	return []gen{constant(reflect.Zero(typ))}
}

func (v *Values) slices(typ reflect.Type, depth int) []gen {
	out := []gen{constant(reflect.Zero(typ)), {"empty", func() reflect.Value { return reflect.MakeSlice(typ, 0, 0) }}}
	if depth <= 0 {
		return out
	}
	elems := v.candidates(typ.Elem(), depth-1)
	if len(elems) == 0 {
		return out
	}
	for _, n := range []int{1, 2, 3, 4, 6, 12} {
		for _, start := range []int{0, 1, 5} {
			out = append(out, gen{fmt.Sprintf("%d elements from #%d", n, start), func() reflect.Value {
				s := reflect.MakeSlice(typ, n, n)
				for i := range n {
					s.Index(i).Set(elems[(start+i)%len(elems)].make())
				}
				return s
			}})
		}
	}
	return out
}

// structs: the registered bases (or the zero value) with one exported field at a time
// replaced by each of its candidates.
func (v *Values) structs(typ reflect.Type, depth int) []gen {
	bases := v.extra[typ]
	out := []gen{constant(reflect.Zero(typ))}
	if len(bases) == 0 {
		bases = out
	}
	if depth <= 0 {
		return out
	}
	for _, base := range bases {
		for i := range typ.NumField() {
			f := typ.Field(i)
			if !f.IsExported() {
				continue
			}
			for _, g := range v.candidates(f.Type, depth-1) {
				out = append(out, gen{fmt.Sprintf("%s with %s=%s", base.desc, f.Name, g.desc), func() reflect.Value {
					s := reflect.New(typ).Elem()
					s.Set(base.make())
					s.Field(i).Set(g.make())
					return s
				}})
			}
		}
	}
	return out
}

// describe prints an argument for a failure message.
func describe(rv reflect.Value) string {
	if !rv.IsValid() {
		return "<nil>"
	}
	if t, ok := rv.Interface().(*tensor.Tensor); ok {
		if t == nil {
			return "(*Tensor)(nil)"
		}
		return fmt.Sprintf("Tensor%v/%v/%d elems", t.Shape(), t.DType(), t.Len())
	}
	s := fmt.Sprintf("%#v", rv.Interface())
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

// Options tune Check.
type Options struct {
	// Random is the number of random argument combinations per function (default 200).
	Random int
	// TensorErrors requires every error to be a *tensor.Error wrapping one of tensor's
	// sentinels (the libraries' convention).
	TensorErrors bool
	// Valid maps a function's name to a maker of one valid argument list (fresh values each
	// time). The call with exactly these arguments must succeed, and every parameter's
	// candidates are varied one at a time from them, so each check behind the first is reached
	// (random picks rarely make a valid call of a function with several tensors).
	Valid map[string]func() []any
}

// Check calls every function of funcs (name → function value or method expression) with the
// candidate arguments and reports each panic, with its arguments and stack, as a test error.
func Check(t *testing.T, funcs map[string]any, v *Values, opt Options) {
	t.Helper()
	if opt.Random == 0 {
		opt.Random = 200
	}
	for _, name := range sortedKeys(funcs) {
		t.Run(name, func(t *testing.T) { checkFunc(t, name, reflect.ValueOf(funcs[name]), v, opt) })
	}
}

func checkFunc(t *testing.T, name string, fn reflect.Value, v *Values, opt Options) {
	if fn.Kind() != reflect.Func {
		t.Fatalf("%s is a %v, not a function", name, fn.Kind())
	}
	ft := fn.Type()
	cands := make([][]gen, ft.NumIn())
	valid := opt.Valid[name]
	for i := range cands {
		cands[i] = v.candidates(ft.In(i), 2)
		if valid != nil {
			cands[i] = append([]gen{{"valid", func() reflect.Value { return argValue(valid()[i], ft.In(i)) }}}, cands[i]...)
		}
		if len(cands[i]) == 0 {
			t.Fatalf("%s: no candidates for parameter %d (%v)", name, i, ft.In(i))
		}
	}
	if valid != nil {
		if n := len(valid()); n != ft.NumIn() {
			t.Fatalf("%s: Valid gives %d arguments, the function takes %d", name, n, ft.NumIn())
		}
		args := make([]reflect.Value, ft.NumIn())
		for i := range args {
			args[i] = cands[i][0].make()
		}
		out, msg := invoke(fn, args)
		if msg != "" {
			t.Fatalf("%s with its valid arguments panicked: %s", name, msg)
		}
		if len(out) > 0 {
			if err, ok := out[len(out)-1].Interface().(error); ok && err != nil {
				t.Fatalf("%s with its valid arguments failed: %v", name, err)
			}
		}
	}
	failures := 0
	call := func(pick []int) {
		if failures >= 5 {
			return
		}
		args := make([]reflect.Value, len(pick))
		descs := make([]string, len(pick))
		for i, p := range pick {
			args[i] = cands[i][p].make()
			descs[i] = cands[i][p].desc
		}
		out, msg := invoke(fn, args)
		if msg != "" {
			failures++
			t.Errorf("%s(%s) panicked: %s", name, strings.Join(descs, ", "), msg)
			return
		}
		if opt.TensorErrors && len(out) > 0 {
			if err, ok := out[len(out)-1].Interface().(error); ok && err != nil && !isTensorError(err) {
				failures++
				t.Errorf("%s(%s) returned %T %q, not a *tensor.Error wrapping a sentinel", name, strings.Join(descs, ", "), err, err)
			}
		}
	}
	pick := make([]int, len(cands))
	call(pick)
	for i := range cands {
		for j := 1; j < len(cands[i]); j++ {
			p := make([]int, len(cands))
			p[i] = j
			call(p)
		}
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	r := rand.New(rand.NewPCG(h.Sum64(), 1))
	for range opt.Random {
		p := make([]int, len(cands))
		for i := range p {
			p[i] = r.IntN(len(cands[i]))
		}
		call(p)
	}
}

// argValue converts x to a value of type typ (nil to its zero value).
func argValue(x any, typ reflect.Type) reflect.Value {
	if x == nil {
		return reflect.Zero(typ)
	}
	return reflect.ValueOf(x).Convert(typ)
}

// invoke calls fn and returns the panic message and stack when it panics.
func invoke(fn reflect.Value, args []reflect.Value) (out []reflect.Value, msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprintf("%v\n%s", r, debug.Stack())
		}
	}()
	if fn.Type().IsVariadic() {
		return fn.CallSlice(args), ""
	}
	return fn.Call(args), ""
}

var sentinels = []error{tensor.ErrShape, tensor.ErrDType, tensor.ErrBackend, tensor.ErrParam, tensor.ErrNotFinite, tensor.ErrDevice, tensor.ErrClosed}

func isTensorError(err error) bool {
	var te *tensor.Error
	if !errors.As(err, &te) {
		return false
	}
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}
