package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoadConfig: any YAML file with any override gives a configuration or an error, never a
// panic; a configuration it accepts is valid, and its YAML (what a run directory and every
// checkpoint store) loads back to the same values. Seeds: testdata/fuzz/FuzzLoadConfig.
func FuzzLoadConfig(f *testing.F) {
	seed, err := os.ReadFile("testdata/mtrl-config.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed, "training.steps=3")
	f.Add(defaultYAML, "optimization.divergence_penalty=full")
	dir := f.TempDir() // one fuzzing process runs one input at a time
	f.Fuzz(func(t *testing.T, yml []byte, override string) {
		path := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(path, yml, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := LoadConfig(path, []string{override})
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("LoadConfig accepted a configuration Validate refuses: %v", err)
		}
		again := filepath.Join(dir, "again.yaml")
		if err := os.WriteFile(again, c.YAML(), 0o644); err != nil {
			t.Fatal(err)
		}
		c2, err := LoadConfig(again, nil)
		if err != nil {
			t.Fatalf("the YAML of an accepted configuration does not load: %v\n%s", err, c.YAML())
		}
		a, b := c.leaves(), c2.leaves()
		for k, va := range a {
			if fmt.Sprint(va) != fmt.Sprint(b[k]) {
				t.Fatalf("%s: %v, reloaded %v", k, va, b[k])
			}
		}
	})
}

// FuzzLoadCheckpoint: a checkpoint with any one file replaced by arbitrary bytes, with or
// without its manifest, never panics Trainer.Load; with the manifest a changed file is always
// refused (never loaded silently), and whatever loads holds finite weights. Seeds: the files of a
// real checkpoint (built here) and testdata/fuzz/FuzzLoadCheckpoint.
func FuzzLoadCheckpoint(f *testing.F) {
	dir := f.TempDir()
	cfg := tinyConfig(f, dir, "training.steps=1")
	tr, err := NewTrainer(cfg)
	if err != nil {
		f.Fatal(err)
	}
	if err := tr.FreezeReference(); err != nil {
		f.Fatal(err)
	}
	ck := &Checkpoints{Root: filepath.Join(dir, "checkpoints")}
	good, err := tr.Save(ck)
	if err != nil {
		f.Fatal(err)
	}
	names := []string{ckptModel, ckptOptimizer, ckptState, ckptConfig, ckptRef, ckptManifest}
	orig := map[string][]byte{}
	for _, n := range names {
		if orig[n], err = os.ReadFile(filepath.Join(good, n)); err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(len(orig)-1), orig[n], true)
	}
	f.Add(uint8(0), orig[ckptModel][:len(orig[ckptModel])/2], false)
	f.Add(uint8(2), []byte(`{"global_step": -1}`), false)
	f.Fuzz(func(t *testing.T, which uint8, data []byte, manifest bool) {
		name := names[int(which)%len(names)]
		d := t.TempDir()
		for _, n := range names {
			b := orig[n]
			if n == name {
				b = data
			}
			if n == ckptManifest && !manifest {
				continue
			}
			if err := os.WriteFile(filepath.Join(d, n), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		err := tr.Load(d)
		changed := !bytes.Equal(data, orig[name])
		if err == nil && manifest && changed {
			t.Fatalf("%s changed, yet the checkpoint with its manifest loaded", name)
		}
		if err != nil {
			return
		}
		for _, p := range tr.model.Params() {
			w, _ := p.W.Float32s()
			for _, x := range w {
				if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
					t.Fatalf("loaded a non-finite weight in %s", p.Name)
				}
			}
		}
	})
}
