package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCrashResume (MTRL_CRASH_TEST=1; scripts/crash-test, in CI) builds the trainer, kills it
// with SIGKILL at chosen moments of a short run (inside the warm start, inside warm-start and RL
// checkpoints, the first one included, between a checkpoint and its tracker, while replacing a
// checkpoint, and at timed moments one after another), SIGTERMs it during the warm start, and
// runs the same command again until it finishes. Every run must end with the metrics,
// rollouts.md, attention_diagnostics.md and final weights of an uninterrupted run, and no
// temporary file or warm-start checkpoint left.
func TestCrashResume(t *testing.T) {
	if os.Getenv("MTRL_CRASH_TEST") == "" {
		t.Skip("MTRL_CRASH_TEST not set (scripts/crash-test)")
	}
	if runtime.GOOS == "windows" {
		t.Skip("SIGKILL and SIGTERM: Unix only")
	}
	bin := filepath.Join(t.TempDir(), "trainer")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stderr = os.Stderr
	require.NoError(t, build.Run(), "go build")

	args := func(dir string) []string {
		return append(append([]string{"training.run_dir=" + dir}, tinyOverrides...),
			"training.sft_steps=40", "training.sft_save_freq=4", "training.steps=6", "training.save_freq=2",
			"training.rollout_log_freq=1", "worker.reward.mdi_weight=1", "training.find_last_checkpoint=true")
	}
	root := t.TempDir()
	ref := filepath.Join(root, "uninterrupted")
	t0 := time.Now()
	finish(t, bin, args(ref))
	whole := time.Since(t0)

	// Each scenario: the pause points of successive attempts, each killed there, then one
	// attempt that runs to the end.
	for _, sc := range []struct {
		name   string
		pauses []string
	}{
		{"inside the warm start's checkpoint", []string{"sft_step_4:files"}},
		{"warm-start checkpoint renamed in, older ones not yet removed", []string{"sft_step_8:commit"}},
		{"inside the first RL checkpoint", []string{"global_step_0:files"}},
		{"first RL checkpoint about to be renamed in", []string{"global_step_0:commit"}},
		{"checkpoint in place, tracker not updated; then while replacing it", []string{"global_step_4:tracker", "global_step_4:replace"}},
		{"inside a later checkpoint, twice", []string{"global_step_2:files", "global_step_4:commit", "global_step_6:files"}},
	} {
		dir := filepath.Join(root, strings.NewReplacer(" ", "_", ",", "", ";", "").Replace(sc.name))
		for _, p := range sc.pauses {
			killAt(t, bin, args(dir), p)
		}
		finish(t, bin, args(dir))
		t.Run(sc.name, func(t *testing.T) { sameCrashRun(t, ref, dir) })
	}

	// SIGTERM during the warm start (after its first checkpoint): it saves where it is and
	// exits 130; the same command resumes it.
	dir := filepath.Join(root, "sigterm")
	cmd := start(t, bin, args(dir), "")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	waitFor(t, func() bool {
		_, err := os.Stat(filepath.Join(dir, "checkpoints", "sft_step_4", ckptManifest))
		return err == nil
	})
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	var ee *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("SIGTERM: want exit status 130, got %v", err)
	}
	require.Contains(t, stderr.String(), "interrupted during the warm start; checkpoint "+filepath.Join(dir, "checkpoints", warmPrefix))
	finish(t, bin, args(dir))
	t.Run("SIGTERM in the warm start", func(t *testing.T) { sameCrashRun(t, ref, dir) })

	// Kills at timed moments, each attempt a little later (from a tenth of the uninterrupted
	// run's time, by a twentieth), until one finishes.
	dir = filepath.Join(root, "timed")
	done, attempts := false, 0
	for i := 0; i < 40 && !done; i++ {
		attempts++
		cmd := start(t, bin, args(dir), "")
		require.NoError(t, cmd.Start())
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			require.NoError(t, err, "attempt %d", i)
			done = true
		case <-time.After(whole * time.Duration(2+i) / 20):
			require.NoError(t, cmd.Process.Kill())
			<-exited
		}
	}
	require.True(t, done, "the timed attempts never finished")
	t.Logf("timed kills: %d attempts (the uninterrupted run took %v)", attempts, whole)
	t.Run("timed kills", func(t *testing.T) { sameCrashRun(t, ref, dir) })
}

// sameCrashRun: dir ended as the uninterrupted run ref, with nothing left over.
func sameCrashRun(t *testing.T, ref, dir string) {
	sameRun(t, ref, dir, 6)
	require.NoError(t, filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		require.NoError(t, err)
		if strings.HasPrefix(info.Name(), ".tmp-") || strings.HasPrefix(info.Name(), warmPrefix) || strings.HasSuffix(info.Name(), ".old") {
			t.Errorf("left over: %s", p)
		}
		return nil
	}))
}

// start runs the trainer with args; pause, when not empty, is its MTRL_TRAINER_TEST_PAUSE.
func start(t *testing.T, bin string, args []string, pause string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "MTRL_TRAINER_TEST_PAUSE="+pause)
	cmd.Stdout = io.Discard
	return cmd
}

// finish runs the command to the end; it must succeed.
func finish(t *testing.T, bin string, args []string) {
	t.Helper()
	cmd := start(t, bin, args, "")
	var out strings.Builder
	cmd.Stderr = &out
	require.NoError(t, cmd.Run(), "%s", out.String())
}

// killAt runs the command until it pauses at pause, and kills it there with SIGKILL.
func killAt(t *testing.T, bin string, args []string, pause string) {
	t.Helper()
	cmd := start(t, bin, args, pause)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(stderr)
	var seen []string
	for sc.Scan() {
		seen = append(seen, sc.Text())
		if strings.Contains(sc.Text(), "MTRL_TRAINER_TEST_PAUSE: paused at "+pause) {
			require.NoError(t, cmd.Process.Kill())
			go io.Copy(io.Discard, stderr)
			_ = cmd.Wait()
			return
		}
	}
	_ = cmd.Wait()
	t.Fatalf("the trainer never paused at %s:\n%s", pause, strings.Join(seen, "\n"))
}

// waitFor polls cond for up to a minute.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 6000 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal(fmt.Errorf("timed out"))
}
