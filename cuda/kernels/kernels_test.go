package kernels

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	. "github.com/mtrl-go/mtrl/cuda/kernels/internal/build"
)

// TestGenerated is the drift check of the committed PTX; it needs no GPU and no build tag.
//
//  1. Every source (*.cu, *.cuh) has the hash the manifest records, and no more or fewer: a
//     source edited without `go generate` fails here, with or without nvcc.
//  2. Every committed *.ptx has the hash the manifest records (and the embedded copies match).
//  3. With nvcc on PATH (or $NVCC), every source is recompiled and compared byte for byte with
//     the committed PTX. Without nvcc this step is skipped with a message, unless
//     MTRL_REQUIRE_NVCC=1, when it fails (CI sets it after installing the toolkit).
func TestGenerated(t *testing.T) {
	m, err := ReadManifest(".")
	if err != nil {
		t.Fatalf("manifest.json: %v (run go generate ./cuda/kernels)", err)
	}
	want, err := BuildManifest(".", m.NVCC, readPTX(t))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.Flags, NVCCFlags) {
		t.Errorf("manifest flags %q, NVCCFlags %q: run go generate ./cuda/kernels", m.Flags, NVCCFlags)
	}
	diff(t, "source", m.Sources, want.Sources)
	diff(t, "output", m.Outputs, want.Outputs)
	srcs, _, _ := Sources(".")
	if len(srcs) != len(want.Outputs) {
		t.Errorf("%d sources but %d PTX files: run go generate ./cuda/kernels", len(srcs), len(want.Outputs))
	}
	for _, mod := range Modules() {
		b, err := os.ReadFile(mod.Name + ".ptx")
		if err != nil || !bytes.Equal(b, []byte(mod.PTX)) {
			t.Errorf("embedded %s.ptx differs from the file", mod.Name)
		}
	}

	nvcc := os.Getenv("NVCC")
	if nvcc == "" {
		nvcc = "nvcc"
	}
	if _, err := exec.LookPath(nvcc); err != nil {
		if os.Getenv("MTRL_REQUIRE_NVCC") == "1" {
			t.Fatalf("MTRL_REQUIRE_NVCC=1 but %s is not on PATH", nvcc)
		}
		t.Skipf("SKIP recompilation: %s not found; the sources were checked against manifest.json only (install nvidia-cuda-toolkit, or set MTRL_REQUIRE_NVCC=1 to make this a failure)", nvcc)
	}
	ver, err := NVCCVersion(nvcc)
	if err != nil {
		t.Fatal(err)
	}
	if ver != m.NVCC {
		msg := "manifest was generated with " + m.NVCC + ", this nvcc is " + ver
		if os.Getenv("MTRL_REQUIRE_NVCC") == "1" {
			t.Fatal(msg)
		}
		t.Skip("SKIP recompilation: " + msg)
	}
	got, err := Compile(nvcc, ".")
	if err != nil {
		t.Fatal(err)
	}
	for f, b := range got {
		old, err := os.ReadFile(f)
		if err != nil {
			t.Errorf("%s: not committed (%v): run go generate ./cuda/kernels", f, err)
			continue
		}
		if !bytes.Equal(old, b) {
			t.Errorf("%s differs from what nvcc produces from the sources: run go generate ./cuda/kernels", f)
		}
	}
}

func readPTX(t *testing.T) map[string][]byte {
	files, _ := filepath.Glob("*.ptx")
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[f] = b
	}
	return out
}

func diff(t *testing.T, what string, recorded, actual map[string]string) {
	t.Helper()
	for f, h := range actual {
		if r, ok := recorded[f]; !ok {
			t.Errorf("%s %s is not in manifest.json: run go generate ./cuda/kernels", what, f)
		} else if r != h {
			t.Errorf("%s %s changed since the PTX was generated (sha256 %s, manifest %s): run go generate ./cuda/kernels", what, f, short(h), short(r))
		}
	}
	for f := range recorded {
		if _, ok := actual[f]; !ok {
			t.Errorf("manifest.json lists %s %s, which does not exist: run go generate ./cuda/kernels", what, f)
		}
	}
}

func short(h string) string { return strings.TrimSpace(h)[:min(12, len(h))] }

func TestModulesNamed(t *testing.T) {
	for _, m := range Modules() {
		if !strings.Contains(m.PTX, ".entry") {
			t.Errorf("%s.ptx has no kernel entry", m.Name)
		}
	}
}
