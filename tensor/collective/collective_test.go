package collective_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/mtrl-go/mtrl/tensor/collective"
)

// values gives rank r's buffer: sums of these in another order round differently.
func values(r, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.Pow(10, float64((r*7+i)%9-4))) * float32(1+r)
	}
	return v
}

func checkGroup(t *testing.T, size int, run func(fn func(ctx context.Context, c collective.Comm) error) error) {
	t.Helper()
	const n = 33
	want := make([]float32, n)
	for i := range want {
		acc := values(0, n)[i]
		for r := 1; r < size; r++ {
			acc += values(r, n)[i]
		}
		want[i] = acc
	}
	var mu sync.Mutex
	got := map[int][]float32{}
	err := run(func(ctx context.Context, c collective.Comm) error {
		if c.Size() != size {
			return fmt.Errorf("size %d, want %d", c.Size(), size)
		}
		buf := values(c.Rank(), n)
		if err := c.AllReduceFloat32(ctx, buf, collective.Sum); err != nil {
			return err
		}
		mx := []float64{float64(c.Rank()), -float64(c.Rank())}
		if err := c.AllReduceFloat64(ctx, mx, collective.Max); err != nil {
			return err
		}
		if mx[0] != float64(size-1) || mx[1] != 0 {
			return fmt.Errorf("max %v", mx)
		}
		mn := []float64{float64(c.Rank())}
		if err := c.AllReduceFloat64(ctx, mn, collective.Min); err != nil {
			return err
		}
		if mn[0] != 0 {
			return fmt.Errorf("min %v", mn)
		}
		b := []byte{byte(c.Rank()), 0}
		if err := c.Broadcast(ctx, b, size-1); err != nil {
			return err
		}
		if b[0] != byte(size-1) {
			return fmt.Errorf("broadcast got %d", b[0])
		}
		all, err := collective.AllGatherBytes(ctx, c, make([]byte, c.Rank()))
		if err != nil {
			return err
		}
		for r, p := range all {
			if len(p) != r {
				return fmt.Errorf("all-gather: rank %d sent %d bytes, got %d", r, r, len(p))
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		mu.Lock()
		got[c.Rank()] = buf
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 {
		t.Fatal("no rank finished")
	}
	for r := range got { // every rank of this process (MPI: this process's ranks only)
		for i := range want {
			if math.Float32bits(got[r][i]) != math.Float32bits(want[i]) {
				t.Fatalf("rank %d element %d: %v, want %v (rank-order sum, bit for bit)", r, i, got[r][i], want[i])
			}
		}
	}
}

func TestRun(t *testing.T) {
	for _, size := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			checkGroup(t, size, func(fn func(context.Context, collective.Comm) error) error {
				return collective.Run(context.Background(), size, fn)
			})
		})
	}
}

// TestHierarchical runs 3 "processes" of 2 ranks each; the process level is itself an
// in-process group standing in for MPI.
func TestHierarchical(t *testing.T) {
	const procs, per = 3, 2
	inter, err := collective.NewGroup(procs)
	if err != nil {
		t.Fatal(err)
	}
	checkGroup(t, procs*per, func(fn func(context.Context, collective.Comm) error) error {
		errs := make(chan error, procs)
		for p := range procs {
			go func() {
				errs <- collective.Run(context.Background(), per, func(ctx context.Context, c collective.Comm) error {
					return fn(ctx, collective.Hierarchical(c, inter[p]))
				})
			}()
		}
		var first error
		for range procs {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		return first
	})
}

// TestRankFailure: one rank fails before a collective; the others, blocked in it, are released
// with ErrAborted and Run returns the failing rank's error.
func TestRankFailure(t *testing.T) {
	boom := errors.New("injected failure")
	done := make(chan error, 1)
	go func() {
		done <- collective.Run(context.Background(), 4, func(ctx context.Context, c collective.Comm) error {
			if c.Rank() == 2 {
				time.Sleep(10 * time.Millisecond)
				return boom
			}
			err := c.AllReduceFloat32(ctx, make([]float32, 4), collective.Sum)
			if !collective.IsAborted(err) {
				return fmt.Errorf("want ErrAborted, got %v", err)
			}
			return err
		})
	}()
	select {
	case err := <-done:
		if !errors.Is(err, boom) || err.Error() != "rank 2: injected failure" {
			t.Fatalf("Run: %v, want rank 2's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the other ranks hang")
	}
}

func TestCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	err := collective.Run(ctx, 2, func(ctx context.Context, c collective.Comm) error {
		if c.Rank() == 0 {
			<-ctx.Done()
			return ctx.Err()
		}
		return c.Barrier(ctx)
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

func TestMismatch(t *testing.T) {
	err := collective.Run(context.Background(), 2, func(ctx context.Context, c collective.Comm) error {
		return c.AllReduceFloat32(ctx, make([]float32, 1+c.Rank()), collective.Sum)
	})
	if !errors.Is(err, collective.ErrMismatch) {
		t.Fatalf("got %v, want ErrMismatch", err)
	}
}

func ExampleRun() {
	var mu sync.Mutex
	sums := make([][]float32, 4)
	err := collective.Run(context.Background(), 4, func(ctx context.Context, c collective.Comm) error {
		grad := []float32{float32(c.Rank()), 1} // this rank's gradient
		if err := c.AllReduceFloat32(ctx, grad, collective.Sum); err != nil {
			return err
		}
		mu.Lock()
		sums[c.Rank()] = grad
		mu.Unlock()
		return nil
	})
	fmt.Println(sums, err)
	// Output: [[6 4] [6 4] [6 4] [6 4]] <nil>
}
