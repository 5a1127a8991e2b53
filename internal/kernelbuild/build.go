// Package kernelbuild compiles the CUDA kernel sources of one directory (cuda/kernels, the
// example model's kernels, …) with nvcc and describes them in a
// manifest; it is shared by the generator (ptxgen) and the drift tests, and has no embedded files,
// so it builds before any PTX exists.
package kernelbuild

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// NVCCFlags are the flags every source is compiled with: PTX for compute_80 (loaded by the
// driver's JIT on sm_80 and newer, H100/H200 included), no fast math and no contraction into
// fused multiply-adds (results follow the reference's float32 order), no line info (so the
// output does not depend on the source path).
var NVCCFlags = []string{"-ptx", "-arch=compute_80", "-O3", "-fmad=false", "-std=c++14"}

// Manifest records what produced the committed PTX.
type Manifest struct {
	NVCC    string            `json:"nvcc"`    // the `nvcc --version` release line
	Flags   []string          `json:"flags"`   // NVCCFlags
	Sources map[string]string `json:"sources"` // file name -> sha256 of *.cu and *.cuh
	Outputs map[string]string `json:"outputs"` // file name -> sha256 of *.ptx
}

// Sources lists the kernel sources (*.cu) and headers (*.cuh) in dir, sorted.
func Sources(dir string) (cu, headers []string, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range ents {
		switch filepath.Ext(e.Name()) {
		case ".cu":
			cu = append(cu, e.Name())
		case ".cuh":
			headers = append(headers, e.Name())
		}
	}
	slices.Sort(cu)
	slices.Sort(headers)
	return cu, headers, nil
}

// NVCCVersion returns the release line of `nvcc --version`, e.g.
// "Cuda compilation tools, release 11.8, V11.8.89".
func NVCCVersion(nvcc string) (string, error) {
	out, err := exec.Command(nvcc, "--version").Output()
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "release") {
			return strings.TrimSpace(l), nil
		}
	}
	return strings.TrimSpace(string(out)), nil
}

// Compile compiles every source of dir with nvcc into PTX and returns file name -> contents.
// The compilation runs in a temporary copy of the sources, so the output names no local path.
func Compile(nvcc, dir string) (map[string][]byte, error) {
	srcs, hdrs, err := Sources(dir)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "mtrl-kernels-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	for _, f := range append(append([]string{}, srcs...), hdrs...) {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(tmp, f), b, 0o644); err != nil {
			return nil, err
		}
	}
	out := map[string][]byte{}
	for _, f := range srcs {
		ptx := strings.TrimSuffix(f, ".cu") + ".ptx"
		args := append(append([]string{}, NVCCFlags...), "-o", ptx, f)
		cmd := exec.Command(nvcc, args...)
		cmd.Dir = tmp
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("nvcc %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		b, err := os.ReadFile(filepath.Join(tmp, ptx))
		if err != nil {
			return nil, err
		}
		out[ptx] = b
	}
	return out, nil
}

func hashOf(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// BuildManifest describes the sources in dir and the given outputs.
func BuildManifest(dir, nvccVersion string, outputs map[string][]byte) (Manifest, error) {
	m := Manifest{NVCC: nvccVersion, Flags: NVCCFlags, Sources: map[string]string{}, Outputs: map[string]string{}}
	srcs, hdrs, err := Sources(dir)
	if err != nil {
		return m, err
	}
	for _, f := range append(srcs, hdrs...) {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return m, err
		}
		m.Sources[f] = hashOf(b)
	}
	for f, b := range outputs {
		m.Outputs[f] = hashOf(b)
	}
	return m, nil
}

// Encode returns the manifest as indented JSON with a final newline (map keys sorted).
func (m Manifest) Encode() []byte {
	b, _ := json.MarshalIndent(m, "", "\t")
	return append(b, '\n')
}

// ReadManifest reads dir/manifest.json.
func ReadManifest(dir string) (Manifest, error) {
	var m Manifest
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return m, err
	}
	err = json.Unmarshal(b, &m)
	return m, err
}
