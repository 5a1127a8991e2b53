//go:build mpi

package collective_test

import (
	"context"
	"os"
	"testing"

	"github.com/mtrl-go/mtrl/tensor/collective"
)

// TestMain finalises MPI when a test initialised it (mpirun reports a process that exits
// without MPI_Finalize as failed).
func TestMain(m *testing.M) {
	code := m.Run()
	if os.Getenv("OMPI_COMM_WORLD_SIZE") != "" {
		if code != 0 {
			collective.MPIAbort(code)
		}
		_ = collective.MPIFinalize()
	}
	os.Exit(code)
}

// TestMPI runs under mpirun (scripts/ci-mpi: mpirun -np 2 collective.test -test.run MPI): the
// same checks as TestRun on MPI_COMM_WORLD, then 2 goroutine ranks per process joined with
// Hierarchical.
func TestMPI(t *testing.T) {
	if os.Getenv("OMPI_COMM_WORLD_SIZE") == "" {
		t.Skip("not started by mpirun")
	}
	c, err := collective.MPI()
	if err != nil {
		t.Fatal(err)
	}
	checkGroup(t, c.Size(), func(fn func(context.Context, collective.Comm) error) error {
		return fn(context.Background(), c)
	})
	checkShards(t, c.Size(), func(fn func(context.Context, collective.Comm) error) error {
		return fn(context.Background(), c)
	})
	checkGroup(t, 2*c.Size(), func(fn func(context.Context, collective.Comm) error) error {
		return collective.Run(context.Background(), 2, func(ctx context.Context, l collective.Comm) error {
			return fn(ctx, collective.Hierarchical(l, c))
		})
	})
	checkShards(t, 2*c.Size(), func(fn func(context.Context, collective.Comm) error) error {
		return collective.Run(context.Background(), 2, func(ctx context.Context, l collective.Comm) error {
			return fn(ctx, collective.Hierarchical(l, c))
		})
	})
}
