package cu

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestEditedKernelRebuilds proves that an edit to a kernel source, or to a header it includes,
// reaches the next build once `go generate` ran (as scripts/cuda-emu always does), and that a
// binary built before the regeneration refuses to run the old kernel. It builds a small program
// against a copy of the emulator twice (a minute of compiling; skipped with -short).
func TestEditedKernelRebuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the emulator twice")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	tmp := t.TempDir()
	emu, kdir, app := filepath.Join(tmp, "emu"), filepath.Join(tmp, "kernels"), filepath.Join(tmp, "app")
	// The emulator without its generated files.
	copyTree(t, ".", emu, func(rel string) bool {
		return !strings.HasPrefix(filepath.Base(rel), "zz_") && !strings.HasSuffix(rel, "_test.go") && !strings.HasPrefix(rel, "selftest")
	})
	write(t, filepath.Join(kdir, "probe.cuh"), "#pragma once\n#define PROBE_VALUE 1\n")
	write(t, filepath.Join(kdir, "probe.cu"), "#include \"probe.cuh\"\nextern \"C\" __global__ void probe(int* out) {\n    if (threadIdx.x == 0) *out = PROBE_VALUE;\n}\n")
	write(t, filepath.Join(app, "go.mod"), "module app\n\ngo 1.26\n\nrequire gorgonia.org/cu v0.9.6\n\nreplace gorgonia.org/cu => ../emu\n")
	write(t, filepath.Join(app, "main.go"), probeProgram)
	run := func(dir string, args ...string) (string, error) {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	generate := func() {
		if out, err := run(emu, goBin, "run", "./gen", "-o", ".", kdir); err != nil {
			t.Fatalf("gen: %v\n%s", err, out)
		}
	}
	build := func() string {
		bin := filepath.Join(tmp, "probe")
		if out, err := run(app, goBin, "build", "-o", bin, "."); err != nil {
			t.Fatalf("build: %v\n%s", err, out)
		}
		return bin
	}
	generate()
	out, err := run(app, build())
	if err != nil || strings.TrimSpace(out) != "1" {
		t.Fatalf("first build printed %q (%v), want 1", out, err)
	}
	// Edit the header only: the stale binary must refuse to run, the regenerated one print 2.
	write(t, filepath.Join(kdir, "probe.cuh"), "#pragma once\n#define PROBE_VALUE 2\n")
	out, err = run(app, filepath.Join(tmp, "probe"))
	if err == nil || !strings.Contains(out, "kernel sources changed since they were generated") {
		t.Fatalf("binary built before the edit: %q (%v), want the stale-source error", out, err)
	}
	generate()
	out, err = run(app, build())
	if err != nil || strings.TrimSpace(out) != "2" {
		t.Fatalf("after editing the kernel's header: %q (%v), want 2", out, err)
	}
}

const probeProgram = `package main

import (
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"gorgonia.org/cu"
)

const ptx = ".version 7.8\n.target sm_80\n.address_size 64\n.visible .entry probe(.param .u64 out) { ret; }\n"

func main() {
	runtime.LockOSThread()
	dev, _ := cu.GetDevice(0)
	ctx, err := dev.MakeContext(cu.SchedBlockingSync)
	check(err)
	defer ctx.Destroy()
	m, err := cu.LoadData(ptx)
	check(err)
	f, err := m.Function("probe")
	check(err)
	p, err := cu.MemAlloc(4)
	check(err)
	arg := uint64(p)
	check(f.Launch(1, 1, 1, 32, 1, 1, 0, cu.Stream{}, []unsafe.Pointer{unsafe.Pointer(&arg)}))
	var v int32
	check(cu.MemcpyDtoH(unsafe.Pointer(&v), p, 4))
	fmt.Println(v)
}

func check(err error) {
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
}
`

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func copyTree(t *testing.T, from, to string, keep func(rel string) bool) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		if d.IsDir() || !keep(rel) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		write(t, filepath.Join(to, rel), string(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
