package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/nlpodyssey/safetensors"

	"github.com/mtrl-go/mtrl/examples/internal/atomicfile"
)

// NamedTensor is one float32 tensor of a safetensors file.
type NamedTensor struct {
	Name  string
	Shape []int
	Data  []float32
}

// f32View is a float32 tensor as github.com/nlpodyssey/safetensors serializes it: little-endian
// bytes and a shape.
type f32View struct {
	shape []uint64
	data  []byte
}

func (v f32View) DType() safetensors.DType { return safetensors.F32 }
func (v f32View) Shape() []uint64          { return v.shape }
func (v f32View) Data() []byte             { return v.data }
func (v f32View) DataLen() uint64          { return uint64(len(v.data)) }

// EncodeSafetensors writes float32 tensors in the safetensors format with
// github.com/nlpodyssey/safetensors (a port of Hugging Face's reference implementation): an
// 8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets}} with
// the optional "__metadata__" string map, padded with spaces to a multiple of 8 bytes, then the
// little-endian data in name order. The bytes depend only on the tensors and the metadata.
func EncodeSafetensors(ts []NamedTensor, metadata map[string]string) ([]byte, error) {
	views := make(map[string]f32View, len(ts))
	for _, t := range ts {
		if t.Name == "" || t.Name == "__metadata__" {
			return nil, fmt.Errorf("safetensors: bad tensor name %q", t.Name)
		}
		if _, dup := views[t.Name]; dup {
			return nil, fmt.Errorf("safetensors: duplicate tensor %q", t.Name)
		}
		n := 1
		shape := make([]uint64, len(t.Shape))
		for i, d := range t.Shape {
			if d < 0 {
				return nil, fmt.Errorf("safetensors: tensor %q has shape %v", t.Name, t.Shape)
			}
			n *= d
			shape[i] = uint64(d)
		}
		if n != len(t.Data) {
			return nil, fmt.Errorf("safetensors: tensor %q has %d values for shape %v", t.Name, len(t.Data), t.Shape)
		}
		data := make([]byte, 4*len(t.Data))
		for i, x := range t.Data {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(x))
		}
		views[t.Name] = f32View{shape: shape, data: data}
	}
	return safetensors.Serialize(views, metadata)
}

// DecodeSafetensors reads a safetensors file of F32 tensors with
// github.com/nlpodyssey/safetensors, which validates the header (size, JSON, dtypes, offsets
// that tile the data exactly); name says which file in errors.
func DecodeSafetensors(data []byte, name string) (map[string]NamedTensor, error) {
	st, err := safetensors.Deserialize(data)
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", name, err)
	}
	out := map[string]NamedTensor{}
	for _, nt := range st.Tensors() {
		v := nt.TensorView
		if v.DType() != safetensors.F32 {
			return nil, fmt.Errorf("safetensors %s: tensor %q has dtype %s, want F32", name, nt.Name, v.DType())
		}
		shape := make([]int, len(v.Shape()))
		for i, d := range v.Shape() {
			shape[i] = int(d)
		}
		raw := v.Data()
		vals := make([]float32, len(raw)/4)
		for i := range vals {
			vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		out[nt.Name] = NamedTensor{Name: nt.Name, Shape: shape, Data: vals}
	}
	return out, nil
}

// Checkpoint files inside a checkpoint directory.
const (
	ckptModel     = "model.safetensors"
	ckptOptimizer = "optimizer.safetensors"
	ckptState     = "state.json"
	ckptConfig    = "config.yaml"
	ckptRef       = "ref.safetensors"    // the frozen reference policy, unless disable_divergence
	ckptCritic    = "critic.safetensors" // the critic's weights and AdamW moments, with gae
	ckptTracker   = "checkpoint_tracker.json"
	// ckptManifest lists the SHA-256 of every other file ("<hex>  <name>" lines, sha256sum's
	// format, so `sha256sum -c checksums.sha256` checks a checkpoint by hand). It is written
	// last, and verified before anything is loaded.
	ckptManifest = "checksums.sha256"
)

// Checkpoints manages run_dir/checkpoints/global_step_N directories. Every save is atomic: the
// files are written into a temporary directory, fsynced, and the directory is renamed into place
// (then the tracker file is replaced the same way), so a failure at any point leaves every earlier
// checkpoint and the tracker as they were.
type Checkpoints struct {
	Root string // run_dir/checkpoints
	// beforeCommit, when set (tests), runs after the files are written and before the rename;
	// an error aborts the save.
	beforeCommit func() error
}

// testBeforeCommit, when set (tests), runs where beforeCommit does, for every Checkpoints.
var testBeforeCommit func(name string) error

func stepDirName(step int) string { return fmt.Sprintf("global_step_%d", step) }

// Save writes the checkpoint of RL step step (files maps file names to contents), then the
// tracker.
func (c *Checkpoints) Save(step int, files map[string][]byte) (dir string, err error) {
	return c.SaveWith(step, files, nil)
}

// SaveWith is Save with more files: write writes them into the checkpoint's temporary directory
// (subdirectories allowed; a model export, say) before the manifest, which lists them too.
func (c *Checkpoints) SaveWith(step int, files map[string][]byte, write func(dir string) error) (dir string, err error) {
	if dir, err = c.saveDir(stepDirName(step), files, write); err != nil {
		return dir, fmt.Errorf("checkpoint step %d: %w", step, err)
	}
	testPause(stepDirName(step), "tracker")
	tracker, _ := json.Marshal(map[string]any{"last_global_step": step, "last_path": stepDirName(step)})
	if err := WriteFileAtomic(filepath.Join(c.Root, ckptTracker), append(tracker, '\n')); err != nil {
		return dir, fmt.Errorf("checkpoint step %d: tracker: %w", step, err)
	}
	return dir, nil
}

// saveDir writes the directory Root/name atomically: files (and what write adds, when not nil)
// into a temporary directory, fsync, rename into place (an existing one of that name is moved
// aside first and removed after).
func (c *Checkpoints) saveDir(name string, files map[string][]byte, write func(dir string) error) (dir string, err error) {
	if err := os.MkdirAll(c.Root, dirMode); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(c.Root, ".tmp-"+name+"-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, dirMode); err != nil { // MkdirTemp makes it 0700
		os.RemoveAll(tmp)
		return "", err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if n == ckptManifest {
			return "", fmt.Errorf("file name %s is the manifest's", n)
		}
		if err := writeSync(filepath.Join(tmp, n), files[n]); err != nil {
			return "", err
		}
	}
	manifest := manifestOf(files)
	if write != nil {
		if err := write(tmp); err != nil {
			return "", err
		}
		if manifest, err = dirManifest(tmp); err != nil {
			return "", err
		}
	}
	testPause(name, "files")
	if err := writeSync(filepath.Join(tmp, ckptManifest), manifest); err != nil {
		return "", err
	}
	if err := atomicfile.SyncDir(tmp); err != nil {
		return "", err
	}
	if c.beforeCommit != nil {
		if err := c.beforeCommit(); err != nil {
			return "", err
		}
	}
	if testBeforeCommit != nil {
		if err := testBeforeCommit(name); err != nil {
			return "", err
		}
	}
	testPause(name, "commit")
	dir = filepath.Join(c.Root, name)
	if _, err := os.Stat(dir); err == nil {
		// Replacing a checkpoint of the same name (a resumed run re-saving it): move the old one
		// aside first, remove it only after the new one is in place (a kill in between leaves
		// the .old one, which cleanStale puts back).
		old := dir + ".old"
		os.RemoveAll(old)
		if err := os.Rename(dir, old); err != nil {
			return "", err
		}
		defer c.removeDir(old)
		testPause(name, "replace")
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	if err := atomicfile.SyncDir(c.Root); err != nil {
		return dir, err
	}
	return dir, nil
}

// Last returns the directory and step of the newest complete checkpoint (the tracker's if it
// names a complete one, else the highest complete global_step_N), or "" when there is none.
func (c *Checkpoints) Last() (string, int, error) {
	if data, err := os.ReadFile(filepath.Join(c.Root, ckptTracker)); err == nil {
		var t struct {
			Step int `json:"last_global_step"`
		}
		if json.Unmarshal(data, &t) == nil {
			dir := filepath.Join(c.Root, stepDirName(t.Step))
			if complete(dir) {
				return dir, t.Step, nil
			}
		}
	}
	return c.newest("global_step_")
}

// newest returns the directory and number of the highest complete Root/<prefix>N, or "".
func (c *Checkpoints) newest(prefix string) (string, int, error) {
	steps, err := c.list(prefix, false)
	if err != nil || len(steps) == 0 {
		return "", 0, err
	}
	return filepath.Join(c.Root, prefix+strconv.Itoa(steps[0])), steps[0], nil
}

// list returns the numbers N of the complete directories Root/<prefix>N (of all of them with
// incomplete), highest first.
func (c *Checkpoints) list(prefix string, incomplete bool) ([]int, error) {
	entries, err := os.ReadDir(c.Root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	var steps []int
	for _, e := range entries {
		s, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.IsDir() {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || strconv.Itoa(n) != s {
			continue
		}
		if incomplete || complete(filepath.Join(c.Root, e.Name())) {
			steps = append(steps, n)
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(steps)))
	return steps, nil
}

// complete reports whether dir holds a checkpoint's files: the optimizer's as
// optimizer.safetensors or as per-rank shards (their index; the shards themselves are checked
// by the manifest, so a checkpoint that lost one is damaged, not skipped).
func complete(dir string) bool {
	regular := func(f string) bool {
		st, err := os.Stat(filepath.Join(dir, f))
		return err == nil && st.Mode().IsRegular()
	}
	for _, f := range []string{ckptModel, ckptState, ckptConfig} {
		if !regular(f) {
			return false
		}
	}
	return regular(ckptOptimizer) || regular(ckptShardIndex)
}

// WriteFileAtomic replaces path by data (mode fileMode) through atomicfile: temp file in the
// same directory, fsync, rename, fsync of the directory.
func WriteFileAtomic(path string, data []byte) error {
	return atomicfile.WriteFile(path, data, fileMode)
}

func writeSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fileMode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// resolveCheckpoint turns training.load_checkpoint_path into a checkpoint directory. path may
// be one (it holds model.safetensors), or a directory holding global_step_N checkpoints
// directly or under checkpoints/ (a run or experiment directory, the seeds' resume form): with
// findLast its newest complete checkpoint, else an error naming it. runDir is the run
// directory the checkpoints belong to ("" for a checkpoint named directly).
func resolveCheckpoint(path string, findLast bool) (ckDir, runDir string, err error) {
	if st, err := os.Stat(filepath.Join(path, ckptModel)); err == nil && st.Mode().IsRegular() {
		return path, "", nil
	}
	if st, err := os.Stat(path); err != nil {
		return "", "", fmt.Errorf("training.load_checkpoint_path: %w", err)
	} else if !st.IsDir() {
		return "", "", fmt.Errorf("training.load_checkpoint_path %s: not a directory (want a checkpoint directory global_step_N, or a run directory to take the newest one from)", path)
	}
	for _, c := range []struct{ root, run string }{
		{filepath.Join(path, "checkpoints"), path},
		{path, filepath.Dir(path)},
	} {
		dir, step, err := (&Checkpoints{Root: c.root}).Last()
		if err != nil || dir == "" {
			continue
		}
		if !findLast {
			return "", "", fmt.Errorf("training.load_checkpoint_path %s holds checkpoints, the newest %s (step %d): name one, or set training.find_last_checkpoint=true to take the newest", path, dir, step)
		}
		if filepath.Base(c.root) != "checkpoints" {
			c.run = "" // not a run's layout: the weights only
		}
		return dir, c.run, nil
	}
	return "", "", fmt.Errorf("training.load_checkpoint_path %s: no %s, and no complete global_step_N checkpoint in it or in its checkpoints/ (want a checkpoint directory, or a run directory holding them)", path, ckptModel)
}
