package cuda

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/mtrl-go/mtrl/tensor"
)

// Bring your own kernels: code outside this package loads its own PTX module on a Backend
// (Backend.LoadModule), declares each kernel's parameters (Module.Kernel) and launches it on the
// backend's context and stream with the device memory of tensor.Tensors (Kernel.Launch). Every
// step is validated: the declaration against the PTX's .entry, each argument against the
// declaration (backend, dtype, kind, liveness of the storage).

// Param declares one kernel parameter: a tensor of one dtype (passed as its device pointer,
// `T*` in the kernel), an int (`long long` / `int64_t`), an int32 (`int`), a float32 (`float`)
// or a float64 (`double`).
type Param struct {
	kind  paramKind
	dtype tensor.DType
}

type paramKind int

const (
	kindTensor paramKind = iota + 1
	kindInt
	kindInt32
	kindFloat32
	kindFloat64
)

// TensorParam is a parameter receiving the device pointer of a tensor of dtype dt (its first
// element).
func TensorParam(dt tensor.DType) Param { return Param{kind: kindTensor, dtype: dt} }

// The scalar parameters: IntParam takes a Go int as a 64-bit integer, Int32Param an int (range
// checked) as a 32-bit one, Float32Param a float32, Float64Param a float64 (`double`).
var (
	IntParam     = Param{kind: kindInt}
	Int32Param   = Param{kind: kindInt32}
	Float32Param = Param{kind: kindFloat32}
	Float64Param = Param{kind: kindFloat64}
)

// size is the parameter's size in bytes, as the PTX declares it.
func (p Param) size() int {
	switch p.kind {
	case kindInt32, kindFloat32:
		return 4
	}
	return 8
}

func (p Param) String() string {
	switch p.kind {
	case kindTensor:
		return "tensor(" + p.dtype.String() + ")"
	case kindInt:
		return "int"
	case kindInt32:
		return "int32"
	case kindFloat32:
		return "float32"
	case kindFloat64:
		return "float64"
	}
	return "invalid"
}

// Dim3 is a grid or block extent; zero fields count as 1.
type Dim3 struct{ X, Y, Z int }

func (d Dim3) norm() Dim3 {
	one := func(v int) int {
		if v == 0 {
			return 1
		}
		return v
	}
	return Dim3{one(d.X), one(d.Y), one(d.Z)}
}

// LaunchConfig is the shape of one launch: Grid blocks of Block threads with SharedBytes of
// dynamic shared memory (extern __shared__).
type LaunchConfig struct {
	Grid, Block Dim3
	SharedBytes int
}

// Limits of a launch that hold on every GPU the PTX targets (compute_80 and newer).
const (
	maxBlockThreads = 1024
	maxGridY        = 65535
	maxDynShared    = 48 << 10 // without cuFuncSetAttribute opt-in
)

func (c LaunchConfig) validate(op string) (LaunchConfig, error) {
	g, b := c.Grid.norm(), c.Block.norm()
	switch {
	case g.X < 1 || g.Y < 1 || g.Z < 1 || g.X > 1<<31-1 || g.Y > maxGridY || g.Z > maxGridY:
		return c, tensor.Errorf(tensor.ErrParam, op, "Grid", "%v is outside [1, 2³¹-1]×[1, 65535]×[1, 65535]", c.Grid)
	case b.X < 1 || b.Y < 1 || b.Z < 1 || b.Z > 64 || b.X*b.Y*b.Z > maxBlockThreads:
		return c, tensor.Errorf(tensor.ErrParam, op, "Block", "%v is not a block of 1 to %d threads", c.Block, maxBlockThreads)
	case c.SharedBytes < 0 || c.SharedBytes > maxDynShared:
		return c, tensor.Errorf(tensor.ErrParam, op, "SharedBytes", "%d is outside [0, %d]", c.SharedBytes, maxDynShared)
	}
	return LaunchConfig{Grid: g, Block: b, SharedBytes: c.SharedBytes}, nil
}

var (
	ptxEntryRE = regexp.MustCompile(`(?s)\.entry\s+([A-Za-z_$][\w$]*)\s*\((.*?)\)`)
	ptxParamRE = regexp.MustCompile(`\.param\s+(?:\.align\s+\d+\s+)?\.([a-z])(\d+)\s+[\w$]+(\[\d+\])?`)
)

// ptxEntries reads the parameter sizes of every .entry of a PTX module; a parameter that is not
// a scalar (a structure passed by value) has size -1, which no Param matches.
func ptxEntries(op, ptx string) (map[string][]int, error) {
	if !strings.Contains(ptx, ".version") || !strings.Contains(ptx, ".target") {
		return nil, tensor.Errorf(tensor.ErrParam, op, "ptx", "is not PTX text (no .version/.target directive)")
	}
	out := map[string][]int{}
	for _, m := range ptxEntryRE.FindAllStringSubmatch(ptx, -1) {
		var sizes []int
		for _, p := range ptxParamRE.FindAllStringSubmatch(m[2], -1) {
			bits, _ := strconv.Atoi(p[2])
			n := bits / 8
			if p[3] != "" {
				n = -1
			}
			sizes = append(sizes, n)
		}
		if strings.Count(m[2], ".param") != len(sizes) {
			return nil, tensor.Errorf(tensor.ErrParam, op, "ptx", "cannot read the parameters of .entry %s", m[1])
		}
		out[m[1]] = sizes
	}
	if len(out) == 0 {
		return nil, tensor.Errorf(tensor.ErrParam, op, "ptx", "has no .entry (kernels must be extern \"C\" __global__)")
	}
	return out, nil
}

// checkSignature compares a declaration with the PTX's parameter sizes.
func checkSignature(op, kernel string, sizes []int, params []Param) error {
	if len(sizes) != len(params) {
		return tensor.Errorf(tensor.ErrParam, op, "params", "kernel %s takes %d parameters, %d declared", kernel, len(sizes), len(params))
	}
	for i, p := range params {
		if p.kind < kindTensor || p.kind > kindFloat64 {
			return tensor.Errorf(tensor.ErrParam, op, "params", "parameter %d of %s is the zero Param", i, kernel)
		}
		if sizes[i] != p.size() {
			return tensor.Errorf(tensor.ErrParam, op, "params", "parameter %d of %s is %d bytes in the PTX, declared %v (%d bytes)", i, kernel, sizes[i], p, p.size())
		}
	}
	return nil
}

// checkArgs validates one launch's arguments against the declaration; it returns the tensors
// by parameter index (nil for scalars) and the scalar slots.
func checkArgs(op, kernel string, b tensor.Backend, params []Param, args []any) ([]*tensor.Tensor, []uint64, error) {
	if len(args) != len(params) {
		return nil, nil, tensor.Errorf(tensor.ErrParam, op, "args", "kernel %s takes %d arguments, got %d", kernel, len(params), len(args))
	}
	ts := make([]*tensor.Tensor, len(args))
	slots := make([]uint64, len(args))
	for i, a := range args {
		name := func() string { return fmt.Sprintf("args[%d]", i) } // formatted on errors only
		p := params[i]
		switch p.kind {
		case kindTensor:
			t, ok := a.(*tensor.Tensor)
			if !ok || t == nil {
				return nil, nil, tensor.Errorf(tensor.ErrParam, op, name(), "kernel %s expects a non-nil *tensor.Tensor, got %T", kernel, a)
			}
			if t.Backend() != b {
				return nil, nil, tensor.Errorf(tensor.ErrBackend, op, name(), "tensor is on %s, the kernel runs on %s", t.Backend().Name(), b.Name())
			}
			if t.DType() != p.dtype {
				return nil, nil, tensor.CheckDType(op, name(), t, p.dtype)
			}
			ts[i] = t
		case kindInt:
			v, ok := a.(int)
			if !ok {
				return nil, nil, tensor.Errorf(tensor.ErrParam, op, name(), "kernel %s expects an int, got %T", kernel, a)
			}
			slots[i] = uint64(int64(v))
		case kindInt32:
			v, ok := a.(int)
			if !ok || int(int32(v)) != v {
				return nil, nil, tensor.Errorf(tensor.ErrParam, op, name(), "kernel %s expects an int in the int32 range, got %T %v", kernel, a, a)
			}
			slots[i] = uint64(uint32(int32(v)))
		case kindFloat32:
			v, ok := a.(float32)
			if !ok {
				return nil, nil, tensor.Errorf(tensor.ErrParam, op, name(), "kernel %s expects a float32, got %T", kernel, a)
			}
			slots[i] = uint64(math.Float32bits(v))
		case kindFloat64:
			v, ok := a.(float64)
			if !ok {
				return nil, nil, tensor.Errorf(tensor.ErrParam, op, name(), "kernel %s expects a float64, got %T", kernel, a)
			}
			slots[i] = math.Float64bits(v)
		}
	}
	return ts, slots, nil
}
