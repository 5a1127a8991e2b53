package collective_test

import (
	"context"
	"errors"
	"testing"

	"github.com/mtrl-go/mtrl/internal/hostile"
	"github.com/mtrl-go/mtrl/tensor/collective"
)

// collectiveFuncs lists every exported function of collective and the Comm methods of its
// in-process and hierarchical groups (called on one-rank groups, which never wait for a peer;
// a nil Comm receiver is the caller's bug and is skipped).
func collectiveFuncs() map[string]any {
	return map[string]any{
		"AllGatherBytes":            collective.AllGatherBytes,
		"AllGatherRows":             collective.AllGatherRows,
		"AllGatherValues":           collective.AllGatherValues[float64],
		"OrderedSum":                collective.OrderedSum,
		"AllToAll":                  collective.AllToAll,
		"AllGatherShards":           collective.AllGatherShards,
		"OrderedReduceScatter":      collective.OrderedReduceScatter,
		"ReduceScatterFloat32":      collective.ReduceScatterFloat32,
		"Shard":                     collective.Shard,
		"BytesFloat32":              collective.BytesFloat32,
		"Float32Bytes":              collective.Float32Bytes,
		"Hierarchical":              collective.Hierarchical,
		"IsAborted":                 collective.IsAborted,
		"NewGroup":                  collective.NewGroup,
		"Op.String":                 collective.Op.String,
		"Run":                       collective.Run,
		"NewHostTensors":            collective.NewHostTensors,
		"HostTensors.Rank":          (*collective.HostTensors).Rank,
		"HostTensors.Size":          (*collective.HostTensors).Size,
		"HostTensors.AllReduce":     (*collective.HostTensors).AllReduce,
		"HostTensors.ReduceScatter": (*collective.HostTensors).ReduceScatter,
		"HostTensors.AllGather":     (*collective.HostTensors).AllGather,
		"HostTensors.Broadcast":     (*collective.HostTensors).Broadcast,
		"Comm.AllReduceFloat32": func(ctx context.Context, c collective.Comm, buf []float32, op collective.Op) error {
			if c == nil {
				return nil
			}
			return c.AllReduceFloat32(ctx, buf, op)
		},
		"Comm.AllReduceFloat64": func(ctx context.Context, c collective.Comm, buf []float64, op collective.Op) error {
			if c == nil {
				return nil
			}
			return c.AllReduceFloat64(ctx, buf, op)
		},
		"Comm.Broadcast": func(ctx context.Context, c collective.Comm, buf []byte, root int) error {
			if c == nil {
				return nil
			}
			return c.Broadcast(ctx, buf, root)
		},
		"Comm.AllGather": func(ctx context.Context, c collective.Comm, send, recv []byte) error {
			if c == nil {
				return nil
			}
			return c.AllGather(ctx, send, recv)
		},
		"Comm.Barrier": func(ctx context.Context, c collective.Comm) error {
			if c == nil {
				return nil
			}
			return c.Barrier(ctx)
		},
		"Comm.RankSize": func(c collective.Comm) int {
			if c == nil {
				return 0
			}
			return c.Rank() + c.Size()
		},
	}
}

func one() collective.Comm {
	g, err := collective.NewGroup(1)
	if err != nil {
		panic(err)
	}
	return g[0]
}

func collectiveValues() *hostile.Values {
	v := hostile.NewValues()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	hostile.AddAs[context.Context](v, context.Background(), cancelled, nil)
	hostile.Gen(v, "one-rank group", one)
	hostile.Gen(v, "hierarchical one×one", func() collective.Comm { return collective.Hierarchical(one(), one()) })
	hostile.AddAs[collective.Comm](v, collective.Hierarchical(nil, nil), nil)
	hostile.Gen(v, "host tensors of a one-rank group", func() *collective.HostTensors {
		h, err := collective.NewHostTensors(one())
		if err != nil {
			panic(err)
		}
		return h
	})
	v.Add((*collective.HostTensors)(nil))
	v.Add(collective.Sum, collective.Max, collective.Min, collective.Op(-1), collective.Op(3))
	v.Add(func(ctx context.Context, c collective.Comm) error { return c.Barrier(ctx) },
		func(ctx context.Context, c collective.Comm) error { return errors.New("rank failed") })
	v.Add(collective.ErrAborted)
	return v
}

// TestHostileInputs: no exported function of collective panics, whatever its arguments.
func TestHostileInputs(t *testing.T) {
	hostile.Test(t, collectiveFuncs(), nil, collectiveValues(), hostile.Options{})
}
