package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mtrl-go/mtrl/examples/internal/atomicfile"
)

// Checkpoint integrity: every checkpoint directory carries checksums.sha256, the SHA-256 of
// each of its files, written last. A checkpoint is verified before anything of it is used; a
// damaged one is refused with the file named and the way out (the newest intact checkpoint,
// taken with training.fallback_checkpoint=true). A kill leaves at most temporary files and
// directories (".tmp-*") and a checkpoint moved aside for its replacement (".old"): cleanStale
// removes the first and puts the second back, at the start of the next run.

// manifestOf is the manifest of files: one "<sha256 hex>  <name>" line per file, by name.
func manifestOf(files map[string][]byte) []byte {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var b bytes.Buffer
	for _, n := range names {
		sum := sha256.Sum256(files[n])
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(sum[:]), n)
	}
	return b.Bytes()
}

// dirManifest is the manifest of every file under dir (names relative, with slashes, so a
// model export in a subdirectory is checked too), each fsynced as it is hashed, as are the
// subdirectories.
func dirManifest(dir string) ([]byte, error) {
	sums := map[string]string{}
	var dirs []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, path)
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("checkpoint file %s is not a regular file", rel)
		}
		sum, err := hashFile(path, true)
		if err != nil {
			return err
		}
		sums[filepath.ToSlash(rel)] = sum
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, d := range dirs[1:] { // dir itself is synced by saveDir after the manifest
		if err := atomicfile.SyncDir(d); err != nil {
			return nil, err
		}
	}
	names := make([]string, 0, len(sums))
	for n := range sums {
		names = append(names, n)
	}
	sort.Strings(names)
	var b bytes.Buffer
	for _, n := range names {
		fmt.Fprintf(&b, "%s  %s\n", sums[n], n)
	}
	return b.Bytes(), nil
}

// hashFile is the hex SHA-256 of the file at path, read in a stream; with sync it is fsynced.
func hashFile(path string, sync bool) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	if sync {
		if err := f.Sync(); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// manifestName reports whether name may be listed in a manifest: a clean relative path with
// slashes that stays inside the checkpoint.
func manifestName(name string) bool {
	return name != "" && name != ckptManifest && path.Clean(name) == name && !strings.Contains(name, `\`) &&
		filepath.IsLocal(filepath.FromSlash(name))
}

// damagedError is a checkpoint file that fails its check.
type damagedError struct {
	dir, file, why string
}

func (e *damagedError) Error() string {
	return fmt.Sprintf("checkpoint %s is damaged: %s: %s", e.dir, filepath.Join(e.dir, e.file), e.why)
}

// parseManifest reads dir's manifest into name → hex digest; nil, nil when there is none (a
// checkpoint of a trainer before manifests).
func parseManifest(dir string) (map[string]string, error) {
	data, err := os.ReadFile(filepath.Join(dir, ckptManifest))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	sums := map[string]string{}
	for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if _, err := hex.DecodeString(sum); !ok || err != nil || len(sum) != 2*sha256.Size || name == "" ||
			!manifestName(name) || sums[name] != "" {
			return nil, &damagedError{dir, ckptManifest, fmt.Sprintf("line %d %q is not \"<sha256>  <file>\"", i+1, line)}
		}
		sums[name] = sum
	}
	return sums, nil
}

// readCheckpoint reads the named files of the checkpoint directory dir. With a manifest, every
// file it lists is verified (so is every named file: it must be listed); the others are hashed
// as a stream, not kept (a model export may be large).
func readCheckpoint(dir string, names ...string) (map[string][]byte, error) {
	sums, err := parseManifest(dir)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	read := func(n string) error {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			if sums != nil && errors.Is(err, os.ErrNotExist) {
				return &damagedError{dir, n, "missing, but listed in " + ckptManifest}
			}
			return fmt.Errorf("checkpoint: %w", err)
		}
		files[n] = b
		return nil
	}
	for n, want := range sums {
		var got string
		if slices.Contains(names, n) {
			if err := read(n); err != nil {
				return nil, err
			}
			sum := sha256.Sum256(files[n])
			got = hex.EncodeToString(sum[:])
		} else if got, err = hashFile(filepath.Join(dir, filepath.FromSlash(n)), false); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, &damagedError{dir, n, "missing, but listed in " + ckptManifest}
			}
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
		if got != want {
			return nil, &damagedError{dir, n, fmt.Sprintf("SHA-256 %s, %s says %s", got, ckptManifest, want)}
		}
	}
	for _, n := range names {
		if _, ok := files[n]; ok {
			continue
		}
		if sums != nil {
			return nil, &damagedError{dir, n, "not listed in " + ckptManifest}
		}
		if err := read(n); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// verifyCheckpoint checks every file of dir's manifest; verified is false when dir has none.
func verifyCheckpoint(dir string) (verified bool, err error) {
	sums, err := parseManifest(dir)
	if err != nil || sums == nil {
		return false, err
	}
	_, err = readCheckpoint(dir)
	return err == nil, err
}

// pickIntact returns the newest intact complete directory Root/<prefix>N, N <= from, and the
// complete ones above it that failed their check (with the first failure). An unreadable
// manifest or file counts as damage; an absent manifest (an older trainer) as intact.
func (c *Checkpoints) pickIntact(prefix string, from int) (dir string, step int, damaged []string, firstErr error, err error) {
	steps, err := c.list(prefix, false)
	if err != nil {
		return "", 0, nil, nil, err
	}
	for _, s := range steps {
		if s > from {
			continue
		}
		d := filepath.Join(c.Root, prefix+strconv.Itoa(s))
		if _, verr := verifyCheckpoint(d); verr != nil {
			damaged = append(damaged, d)
			if firstErr == nil {
				firstErr = verr
			}
			continue
		}
		return d, s, damaged, firstErr, nil
	}
	return "", 0, damaged, firstErr, nil
}

// moveAside renames damaged checkpoint directories to <name>.damaged (numbered when taken),
// out of every listing but kept for inspection.
func moveAside(dirs []string) error {
	for _, d := range dirs {
		to := d + ".damaged"
		for i := 2; ; i++ {
			if _, err := os.Lstat(to); errors.Is(err, os.ErrNotExist) {
				break
			}
			to = fmt.Sprintf("%s.damaged%d", d, i)
		}
		if err := os.Rename(d, to); err != nil {
			return err
		}
	}
	return nil
}

// removeDir removes the directory path: renamed to a temporary name first (atomic), so a kill
// during the removal leaves a ".tmp-" directory for cleanStale, never a half-removed checkpoint.
func (c *Checkpoints) removeDir(path string) error {
	tmp := filepath.Join(filepath.Dir(path), fmt.Sprintf(".tmp-removed-%s-%d", filepath.Base(path), time.Now().UnixNano()))
	if err := os.Rename(path, tmp); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	return os.RemoveAll(tmp)
}

// cleanStale removes what a killed run leaves in the run directory dir: temporary files and
// directories (".tmp-*": atomic writes, checkpoints being written or removed) in it, in
// rollouts/ and in checkpoints/, and puts back a checkpoint moved aside (".old") whose
// replacement never arrived. It returns what it did, one line each.
func cleanStale(dir string) ([]string, error) {
	var done []string
	for _, d := range []string{dir, filepath.Join(dir, "rollouts"), filepath.Join(dir, "checkpoints")} {
		entries, err := os.ReadDir(d)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return done, err
		}
		for _, e := range entries {
			p := filepath.Join(d, e.Name())
			switch {
			case strings.HasPrefix(e.Name(), ".tmp-"):
				if err := os.RemoveAll(p); err != nil {
					return done, err
				}
				done = append(done, "removed "+p)
			case e.IsDir() && strings.HasSuffix(e.Name(), ".old") && filepath.Base(d) == "checkpoints":
				orig := strings.TrimSuffix(p, ".old")
				if _, err := os.Lstat(orig); errors.Is(err, os.ErrNotExist) {
					if err := os.Rename(p, orig); err != nil {
						return done, err
					}
					done = append(done, "restored "+orig+" (its replacement was never written)")
					continue
				}
				if err := os.RemoveAll(p); err != nil {
					return done, err
				}
				done = append(done, "removed "+p)
			}
		}
	}
	return done, nil
}

// testPause, for the crash test (scripts/crash-test): with MTRL_TRAINER_TEST_PAUSE=<name>:<phase>
// (a checkpoint directory name such as global_step_2 or sft_step_4, and a phase: files, all
// written but the manifest; commit, before the rename; replace, between moving an older one of
// the name aside and the rename; tracker, a global_step_N in place, the tracker not yet
// updated) the process announces the point on stderr and waits there to be killed.
func testPause(name, phase string) {
	if v := os.Getenv("MTRL_TRAINER_TEST_PAUSE"); v != "" && v == name+":"+phase {
		fmt.Fprintf(os.Stderr, "MTRL_TRAINER_TEST_PAUSE: paused at %s\n", v)
		for {
			time.Sleep(time.Hour)
		}
	}
}

// chooseCheckpoint picks the checkpoint to resume among Root/<prefix>N, N <= from: the newest
// intact one. When newer ones are damaged it is an error naming the damaged file and the newest
// intact checkpoint (or, for the warm start, starting it again), unless fallback
// (training.fallback_checkpoint) takes that one, with a warning. damaged lists what to move
// aside (moveAside) once every rank has chosen. dir is "" when nothing intact is left and
// fallback starts over (the warm start only).
func (c *Checkpoints) chooseCheckpoint(prefix string, from int, fallback bool, warn func(string)) (dir string, step int, damaged []string, err error) {
	dir, step, damaged, derr, err := c.pickIntact(prefix, from)
	if err != nil {
		return "", 0, nil, err
	}
	warm := prefix == warmPrefix
	if len(damaged) > 0 {
		var alt string
		switch {
		case dir != "":
			alt = fmt.Sprintf("the newest intact checkpoint is %s (step %d)", dir, step)
		case warm:
			alt = "no intact warm-start checkpoint is left: the warm start would start again from step 0"
		default:
			return "", 0, nil, fmt.Errorf("%w\nno intact checkpoint is left in %s: start again in another run_dir", derr, c.Root)
		}
		if !fallback {
			return "", 0, nil, fmt.Errorf("%w\n%s: take it with training.fallback_checkpoint=true (what follows it is computed again; the damaged checkpoints are kept as <name>.damaged), or remove %s",
				derr, alt, strings.Join(damaged, " "))
		}
		warn(fmt.Sprintf("%v; %s, taken (training.fallback_checkpoint); the damaged ones move to <name>.damaged", derr, alt))
	}
	if dir != "" {
		if sums, _ := parseManifest(dir); sums == nil {
			warn(fmt.Sprintf("checkpoint %s has no %s (written by an older trainer): loaded without verification", dir, ckptManifest))
		}
	}
	return dir, step, damaged, nil
}

// withIntactAlternative adds to a damaged training.load_checkpoint_path the newest intact
// checkpoint beside it, when there is one.
func withIntactAlternative(err error, dir string) error {
	var d *damagedError
	if !errors.As(err, &d) {
		return err
	}
	s, ok := strings.CutPrefix(filepath.Base(dir), "global_step_")
	step, aerr := strconv.Atoi(s)
	if !ok || aerr != nil {
		return err
	}
	alt, altStep, _, _, perr := (&Checkpoints{Root: filepath.Dir(dir)}).pickIntact("global_step_", step-1)
	if perr != nil || alt == "" {
		return fmt.Errorf("%w\nname another checkpoint in training.load_checkpoint_path", err)
	}
	return fmt.Errorf("%w\nthe newest intact checkpoint beside it is %s (step %d): training.load_checkpoint_path=%s", err, alt, altStep, alt)
}
