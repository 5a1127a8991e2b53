package cu

// #include "runtime.h"
import "C"

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"unsafe"
)

// entry is one .entry of a PTX module: what the driver knows about a kernel.
type entry struct {
	name    string
	params  []int // byte size of each parameter
	ptxType []string
	maxntid [3]int // 0: not declared
}

type module struct {
	ctx     *context
	entries map[string]*entry
}

// Module is a loaded PTX module.
type Module struct{ m *module }

// Function is a kernel of a loaded module, bound to the C++ compilation of its source.
type Function struct{ f *function }

type function struct {
	mod    *module
	entry  *entry
	kernel *kernel
}

// kernel is a kernel compiled into this binary (runtime.cc's registry).
type kernel struct {
	handle  unsafe.Pointer
	name    string
	source  string
	params  []string // parameter names from the source
	size    []int
	pointer []bool
}

var (
	entryRE   = regexp.MustCompile(`(?s)\.entry\s+([A-Za-z_$][\w$]*)\s*\((.*?)\)([^{]*)\{`)
	paramRE   = regexp.MustCompile(`\.param\s+(?:\.align\s+\d+\s+)?\.([a-z]\d+)\s+[\w$]+(?:\[(\d+)\])?`)
	maxntidRE = regexp.MustCompile(`\.maxntid\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?`)
)

// parsePTX reads the kernel entries of a PTX module.
func parsePTX(ptx string) (map[string]*entry, error) {
	if !strings.Contains(ptx, ".version") || !strings.Contains(ptx, ".target") {
		return nil, fmt.Errorf("not PTX text (no .version/.target)")
	}
	out := map[string]*entry{}
	for _, m := range entryRE.FindAllStringSubmatch(ptx, -1) {
		e := &entry{name: m[1]}
		for _, p := range paramRE.FindAllStringSubmatch(m[2], -1) {
			bits, err := strconv.Atoi(p[1][1:])
			if err != nil || bits%8 != 0 {
				return nil, fmt.Errorf("entry %s: parameter type .%s", e.name, p[1])
			}
			n, typ := bits/8, "."+p[1]
			if p[2] != "" { // .b8 name[N]: a structure passed by value
				k, _ := strconv.Atoi(p[2])
				n, typ = n*k, typ+"["+p[2]+"]"
			}
			e.params = append(e.params, n)
			e.ptxType = append(e.ptxType, typ)
		}
		if strings.Count(m[2], ".param") != len(e.params) {
			return nil, fmt.Errorf("entry %s: cannot read its parameter list %q", e.name, m[2])
		}
		if t := maxntidRE.FindStringSubmatch(m[3]); t != nil {
			for i := range 3 {
				e.maxntid[i] = 1
				if t[i+1] != "" {
					e.maxntid[i], _ = strconv.Atoi(t[i+1])
				}
			}
		}
		out[e.name] = e
	}
	return out, nil
}

var (
	registryOnce sync.Once
	registry     map[string]*kernel
)

func kernels() map[string]*kernel {
	registryOnce.Do(func() {
		registry = map[string]*kernel{}
		for i := range int(C.cuemu_kernel_count()) {
			var info C.cuemu_kernel_info
			C.cuemu_kernel_at(C.int(i), &info)
			k := &kernel{
				handle: unsafe.Pointer(info.handle),
				name:   C.GoString(info.name),
				source: C.GoString(info.source),
				params: strings.Split(C.GoString(info.param_names), ","),
			}
			for j := range int(info.nparams) {
				k.size = append(k.size, int(info.size[j]))
				k.pointer = append(k.pointer, info.pointer[j] != 0)
			}
			registry[k.name] = k
		}
	})
	return registry
}

// generation describes the sources the zz_*.cc files were generated from (set by zz_sources.go).
type generation struct {
	files map[string]string // path -> sha256 of the content at generation time
}

var (
	generated  *generation
	staleOnce  sync.Once
	staleError error
)

// checkFresh fails when a kernel source changed since `go generate` copied it: the binary would
// otherwise run the old kernel.
func checkFresh() error {
	staleOnce.Do(func() {
		if generated == nil {
			staleError = errorf(InvalidImage, "no kernels are compiled in: run `go generate` in internal/cuemu (scripts/cuda-emu does)")
			return
		}
		var changed []string
		for path, sum := range generated.files {
			b, err := os.ReadFile(path)
			if err != nil {
				continue // a binary run away from its source tree cannot check
			}
			h := sha256.Sum256(b)
			if hex.EncodeToString(h[:]) != sum {
				changed = append(changed, path)
			}
		}
		if len(changed) > 0 {
			staleError = errorf(InvalidImage, "kernel sources changed since they were generated (%s): run `go generate` in internal/cuemu (scripts/cuda-emu does)", strings.Join(changed, ", "))
		}
	})
	return staleError
}

// LoadData loads a PTX module into the current context.
func LoadData(image string) (Module, error) {
	mu.Lock()
	c := currentLocked("cuModuleLoadData")
	mu.Unlock()
	if err := checkFresh(); err != nil {
		return Module{}, err
	}
	entries, err := parsePTX(image)
	if err != nil {
		return Module{}, errorf(InvalidImage, "%v", err)
	}
	return Module{&module{ctx: c, entries: entries}}, nil
}

// Function returns the kernel called name. It must be an entry of the PTX and compiled into
// the emulator with the parameter sizes the PTX declares.
func (m Module) Function(name string) (Function, error) {
	mu.Lock()
	c := currentLocked("cuModuleGetFunction")
	mu.Unlock()
	if m.m == nil {
		return Function{}, errorf(InvalidHandle, "Function(%q) of a zero Module", name)
	}
	if m.m.ctx != c {
		violation("cuModuleGetFunction(%q): module of context %d used in context %d", name, m.m.ctx.id, c.id)
	}
	e := m.m.entries[name]
	if e == nil {
		return Function{}, NotFound
	}
	k := kernels()[name]
	if k == nil {
		return Function{}, errorf(NotFound, "kernel %s is in the PTX but not compiled into the emulator: run `go generate` in internal/cuemu", name)
	}
	if len(k.size) != len(e.params) {
		return Function{}, errorf(InvalidImage, "kernel %s: the PTX declares %d parameters, its source (%s) %d: is the PTX stale?", name, len(e.params), k.source, len(k.size))
	}
	for i, n := range e.params {
		if n != k.size[i] {
			return Function{}, errorf(InvalidImage, "kernel %s parameter %d (%s): the PTX declares %s (%d bytes), the source %d bytes: is the PTX stale?", name, i, k.params[i], e.ptxType[i], n, k.size[i])
		}
	}
	return Function{&function{mod: m.m, entry: e, kernel: k}}, nil
}
