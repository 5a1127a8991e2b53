package kernelbuild

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Generate compiles the sources of dir with nvcc ($NVCC, default nvcc on PATH), writes the PTX
// next to them (removing stale *.ptx without a source) and rewrites dir/manifest.json. It is the
// body of a directory's `go generate` program.
func Generate(dir string) error {
	nvcc := nvccPath()
	ver, err := NVCCVersion(nvcc)
	if err != nil {
		return fmt.Errorf("%s --version: %v (install nvidia-cuda-toolkit)", nvcc, err)
	}
	out, err := Compile(nvcc, dir)
	if err != nil {
		return err
	}
	old, _ := filepath.Glob(filepath.Join(dir, "*.ptx"))
	for _, f := range old {
		if _, ok := out[filepath.Base(f)]; !ok {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	for f, b := range out {
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			return err
		}
	}
	m, err := BuildManifest(dir, ver, out)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), m.Encode(), 0o644); err != nil {
		return err
	}
	fmt.Printf("gen: %d modules with %s (%s)\n", len(out), ver, strings.Join(NVCCFlags, " "))
	return nil
}

// Check is the drift test of the committed PTX of dir; it needs no GPU and no build tag. regen
// is the command that fixes a failure (e.g. "go generate ./cuda/kernels").
//
//  1. Every source (*.cu, *.cuh) has the hash the manifest records, and no more or fewer: a
//     source edited without regenerating fails here, with or without nvcc.
//  2. Every committed *.ptx has the hash the manifest records.
//  3. With nvcc on PATH (or $NVCC), every source is recompiled and compared byte for byte with
//     the committed PTX. Without nvcc this step is skipped with a message, unless
//     MTRL_REQUIRE_NVCC=1, when it fails (CI sets it after installing the toolkit).
func Check(t *testing.T, dir, regen string) {
	t.Helper()
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatalf("manifest.json: %v (run %s)", err, regen)
	}
	committed := map[string][]byte{}
	files, _ := filepath.Glob(filepath.Join(dir, "*.ptx"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		committed[filepath.Base(f)] = b
	}
	want, err := BuildManifest(dir, m.NVCC, committed)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.Flags, NVCCFlags) {
		t.Errorf("manifest flags %q, NVCCFlags %q: run %s", m.Flags, NVCCFlags, regen)
	}
	diff(t, regen, "source", m.Sources, want.Sources)
	diff(t, regen, "output", m.Outputs, want.Outputs)
	srcs, _, _ := Sources(dir)
	if len(srcs) != len(want.Outputs) {
		t.Errorf("%d sources but %d PTX files: run %s", len(srcs), len(want.Outputs), regen)
	}

	nvcc := nvccPath()
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
	got, err := Compile(nvcc, dir)
	if err != nil {
		t.Fatal(err)
	}
	for f, b := range got {
		old, ok := committed[f]
		if !ok {
			t.Errorf("%s: not committed: run %s", f, regen)
			continue
		}
		if !bytes.Equal(old, b) {
			t.Errorf("%s differs from what nvcc produces from the sources: run %s", f, regen)
		}
	}
}

func diff(t *testing.T, regen, what string, recorded, actual map[string]string) {
	t.Helper()
	for f, h := range actual {
		if r, ok := recorded[f]; !ok {
			t.Errorf("%s %s is not in manifest.json: run %s", what, f, regen)
		} else if r != h {
			t.Errorf("%s %s changed since the PTX was generated (sha256 %s, manifest %s): run %s", what, f, short(h), short(r), regen)
		}
	}
	for f := range recorded {
		if _, ok := actual[f]; !ok {
			t.Errorf("manifest.json lists %s %s, which does not exist: run %s", what, f, regen)
		}
	}
}

func short(h string) string { return strings.TrimSpace(h)[:min(12, len(h))] }

// nvccPath is the compiler: $NVCC, default nvcc on PATH.
func nvccPath() string {
	if nvcc := os.Getenv("NVCC"); nvcc != "" {
		return nvcc
	}
	return "nvcc"
}
