package collective

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/mtrl-go/mtrl/tensor"
)

// Op is the reduction of an all-reduce.
type Op int

const (
	Sum Op = iota // element-wise sum, in rank order
	Max           // element-wise maximum (NaN if any rank holds NaN)
	Min           // element-wise minimum (NaN if any rank holds NaN)
)

func (o Op) String() string {
	switch o {
	case Sum:
		return "sum"
	case Max:
		return "max"
	case Min:
		return "min"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// ErrAborted is wrapped by the error a collective returns when the group was stopped (its
// context cancelled, or another rank failed) before every rank arrived.
var ErrAborted = errors.New("collective: aborted")

// ErrMismatch is wrapped when ranks call a collective with different buffer sizes or roots.
var ErrMismatch = errors.New("collective: ranks disagree")

// Comm is one rank's handle on a group of Size ranks. Every rank must call the same
// collectives in the same order with buffers of the same length; a Comm is used by one
// goroutine at a time.
type Comm interface {
	// Rank is this rank's index in [0, Size).
	Rank() int
	// Size is the number of ranks.
	Size() int
	// AllReduceFloat32 replaces buf, on every rank, by the element-wise reduction of all
	// ranks' buf.
	AllReduceFloat32(ctx context.Context, buf []float32, op Op) error
	// AllReduceFloat64 is AllReduceFloat32 for float64 values.
	AllReduceFloat64(ctx context.Context, buf []float64, op Op) error
	// Broadcast copies root's buf into every other rank's buf.
	Broadcast(ctx context.Context, buf []byte, root int) error
	// AllGather writes every rank's send, in rank order, into recv (len Size·len(send)).
	AllGather(ctx context.Context, send, recv []byte) error
	// Barrier returns when every rank has called it.
	Barrier(ctx context.Context) error
}

// AllGatherBytes gathers one byte slice of any length from every rank, in rank order: two
// collectives (the lengths, then the payloads padded to the longest).
func AllGatherBytes(ctx context.Context, c Comm, send []byte) ([][]byte, error) {
	if err := checkCall(ctx, c); err != nil {
		return nil, err
	}
	n := c.Size()
	var l [8]byte
	binary.LittleEndian.PutUint64(l[:], uint64(len(send)))
	lens := make([]byte, 8*n)
	if err := c.AllGather(ctx, l[:], lens); err != nil {
		return nil, err
	}
	longest := uint64(0)
	for r := range n {
		longest = max(longest, binary.LittleEndian.Uint64(lens[8*r:]))
	}
	// The lengths come from other ranks: refuse any the gather buffer could not hold.
	total, err := tensor.CheckSize("collective.AllGatherBytes", "send", n, int(min(longest, math.MaxInt)))
	if err != nil || longest > math.MaxInt || total > tensor.MaxHostBytes {
		return nil, fmt.Errorf("collective: all-gather of up to %d bytes from each of %d ranks exceeds tensor.MaxHostBytes", longest, n)
	}
	pad := make([]byte, longest)
	copy(pad, send)
	all := make([]byte, total)
	if err := c.AllGather(ctx, pad, all); err != nil {
		return nil, err
	}
	out := make([][]byte, n)
	for r := range n {
		at := r * int(longest)
		out[r] = all[at : at+int(binary.LittleEndian.Uint64(lens[8*r:]))]
	}
	return out, nil
}

// Float32Bytes and BytesFloat32 convert between float32 values and their little-endian bytes
// (the form AllGather and Broadcast move).
func Float32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// BytesFloat32 decodes little-endian float32 values from b into dst and returns how many it
// decoded: min(len(dst), len(b)/4).
func BytesFloat32(dst []float32, b []byte) int {
	n := min(len(dst), len(b)/4)
	for i := range n {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return n
}

// checkCall checks the arguments every collective shares: a context and a Comm.
func checkCall(ctx context.Context, c Comm) error {
	switch {
	case ctx == nil:
		return errors.New("collective: nil context (use context.Background())")
	case c == nil:
		return errors.New("collective: nil Comm")
	}
	return nil
}

// reduceInto sets dst to the reduction of parts, taken in order, element by element; every
// implementation reduces through it so the arithmetic is the same everywhere.
func reduceInto[F float32 | float64](dst []F, parts [][]F, op Op) {
	for i := range dst {
		acc := parts[0][i]
		for _, p := range parts[1:] {
			x := p[i]
			switch op {
			case Sum:
				acc += x
			case Max:
				if x != x || acc != acc {
					acc = F(math.NaN())
				} else {
					acc = max(acc, x)
				}
			case Min:
				if x != x || acc != acc {
					acc = F(math.NaN())
				} else {
					acc = min(acc, x)
				}
			}
		}
		dst[i] = acc
	}
}

func checkOp(op Op) error {
	if op < Sum || op > Min {
		return fmt.Errorf("collective: unknown reduction %v", op)
	}
	return nil
}

func encode[F float32 | float64](v []F) []byte {
	switch x := any(v).(type) {
	case []float32:
		return Float32Bytes(x)
	case []float64:
		b := make([]byte, 8*len(x))
		for i, f := range x {
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(f))
		}
		return b
	}
	panic("unreachable")
}

func decode[F float32 | float64](dst []F, b []byte) {
	switch x := any(dst).(type) {
	case []float32:
		BytesFloat32(x, b)
	case []float64:
		for i := range x {
			x[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		}
	}
}
