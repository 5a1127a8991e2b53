//go:build cuda

package cuda

import (
	"unsafe"

	"github.com/mtrl-go/mtrl/tensor"
	"gorgonia.org/cu"
)

// Module is a PTX module loaded by LoadModule on one backend's context. It lives as long as the
// backend (Close unloads it with the context).
type Module struct {
	b       *Backend
	name    string
	mod     cu.Module
	entries map[string][]int // parameter sizes of each .entry
}

// Kernel is one kernel of a Module with its declared parameters.
type Kernel struct {
	m      *Module
	name   string
	op     string // "cuda.Kernel.Launch(name)", for errors
	params []Param
	fn     cu.Function
}

// LoadModule loads PTX text (nvcc -ptx output, for compute_80 or lower, compiled with
// `extern "C"` kernels) into the backend's context; name identifies the module in errors. The
// driver JIT-compiles it for the device. Under the emulator (internal/cuemu) the kernels must
// also be compiled into the emulator: their .cu directory is listed in its go:generate line.
func (b *Backend) LoadModule(name, ptx string) (*Module, error) {
	const op = "cuda.Backend.LoadModule"
	entries, err := ptxEntries(op, ptx)
	if err != nil {
		return nil, err
	}
	m := &Module{b: b, name: name, entries: entries}
	err = b.do(op, func() error {
		mod, err := cu.LoadData(ptx)
		if err != nil {
			return devErr(op, "cuModuleLoadData", name, err)
		}
		m.mod = mod
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Name returns the name given to LoadModule.
func (m *Module) Name() string { return m.name }

// Has reports whether the module has an entry called name (see Kernel).
func (m *Module) Has(name string) bool {
	_, ok := m.entries[name]
	return ok
}

// Kernel returns the kernel called name (its extern "C" name) with its parameters declared in
// order. The declaration must match the PTX entry: as many parameters, each of the declared
// size (a pointer and an int are 8 bytes, an int32 and a float32 4); otherwise an ErrParam.
func (m *Module) Kernel(name string, params ...Param) (*Kernel, error) {
	const op = "cuda.Module.Kernel"
	sizes, ok := m.entries[name]
	if !ok {
		return nil, tensor.Errorf(tensor.ErrParam, op, "name", "module %s has no kernel %q", m.name, name)
	}
	if err := checkSignature(op, name, sizes, params); err != nil {
		return nil, err
	}
	k := &Kernel{m: m, name: name, op: "cuda.Kernel.Launch(" + name + ")", params: append([]Param(nil), params...)}
	err := m.b.do(op, func() error {
		f, err := m.mod.Function(name)
		if err != nil {
			return devErr(op, "cuModuleGetFunction", name, err)
		}
		k.fn = f
		return nil
	})
	if err != nil {
		return nil, err
	}
	return k, nil
}

// Name returns the kernel's name.
func (k *Kernel) Name() string { return k.name }

// Launch queues the kernel on the backend's stream (after the work queued before it, before
// the work queued after; Download and Sync wait for it). args match the declared parameters
// one for one: a *tensor.Tensor of this backend with the declared dtype (its storage not
// released) for a TensorParam, an int for IntParam and Int32Param, a float32 for Float32Param.
// The kernel's own memory accesses are not checked: it must stay inside the tensors it is given.
// Errors of the kernel itself may surface here or at the next synchronising call.
func (k *Kernel) Launch(cfg LaunchConfig, args ...any) error {
	op := k.op
	cfg, err := cfg.validate(op)
	if err != nil {
		return err
	}
	ts, slots, err := checkArgs(op, k.name, k.m.b, k.params, args)
	if err != nil {
		return err
	}
	b := k.m.b
	return b.do(op, func() error {
		for i, t := range ts {
			if t == nil {
				continue
			}
			p, err := b.ptrOf(op, "args", t)
			if err != nil {
				return err
			}
			slots[i] = uint64(p)
		}
		params := make([]unsafe.Pointer, len(slots))
		for i := range slots {
			params[i] = unsafe.Pointer(&slots[i])
		}
		g, bl := cfg.Grid, cfg.Block
		if err := k.fn.Launch(g.X, g.Y, g.Z, bl.X, bl.Y, bl.Z, cfg.SharedBytes, b.stream, params); err != nil {
			return devErr(op, "cuLaunchKernel", k.name, err)
		}
		return nil
	})
}
