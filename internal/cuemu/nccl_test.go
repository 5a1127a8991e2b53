package cu

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

// withDevices makes the emulator report n devices for the test.
func withDevices(t *testing.T, n int) {
	old := config.devices
	config.devices = n
	t.Cleanup(func() { config.devices = old })
}

// onDevices runs fn(rank) for each rank on its own locked OS thread with a context current
// on device rank, and waits for them.
func onDevices(t *testing.T, n int, fn func(rank int)) {
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			ctx, err := Device(r).MakeContext(SchedBlockingSync)
			if err != nil {
				t.Error(err)
				return
			}
			defer func() {
				if err := ctx.Destroy(); err != nil {
					t.Error(err)
				}
			}()
			fn(r)
		})
	}
	wg.Wait()
}

func devFloats(t *testing.T, v []float32) DevicePtr {
	p, err := MemAlloc(int64(4 * max(1, len(v))))
	if err != nil {
		t.Fatal(err)
	}
	if len(v) > 0 {
		if err := MemcpyHtoD(p, unsafe.Pointer(&v[0]), int64(4*len(v))); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func hostFloats(t *testing.T, p DevicePtr, n int) []float32 {
	v := make([]float32, n)
	if err := MemcpyDtoH(unsafe.Pointer(&v[0]), p, int64(4*n)); err != nil {
		t.Error(err)
	}
	return v
}

// ptr is the device address p as the C entry points take it.
func ptr(p DevicePtr) unsafe.Pointer {
	mu.Lock()
	defer mu.Unlock()
	a := findLocked(p, 0)
	return unsafe.Add(a.ptr, int(p-a.base))
}

// rankValues are rank r's inputs: values whose float32 sums depend on the order of addition,
// signed zeros, and (at index 5 of rank 1) a NaN.
func rankValues(r, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.Ldexp(float64(1+(i*7+r*3)%11), (i+r)%30-15)) * float32(1-2*((i+r)%2))
	}
	v[0] = float32(math.Copysign(0, float64(1-2*(r%2))))
	if r == 1 && n > 5 {
		v[5] = float32(math.NaN())
	}
	return v
}

// reference reduces the ranks' values in rank order, as package collective does.
func reference(parts [][]float32, op int) []float32 {
	out := append([]float32(nil), parts[0]...)
	for _, p := range parts[1:] {
		for i, x := range p {
			a := out[i]
			switch op {
			case redSum:
				a += x
			case redProd:
				a *= x
			case redMax, redMin:
				if x != x || a != a {
					a = float32(math.NaN())
				} else if op == redMax {
					a = max(a, x)
				} else {
					a = min(a, x)
				}
			}
			out[i] = a
		}
	}
	return out
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Errorf("%s: element %d is %v (%#x), want %v (%#x)", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			return
		}
	}
}

// TestNCCLStandIn: three ranks on three emulated devices, each on its own thread and stream,
// run every collective, in place and not; the results are bit for bit the rank-order
// reductions, on every rank.
func TestNCCLStandIn(t *testing.T) {
	const ranks, n = 3, 37
	withDevices(t, ranks)
	var id ncclIDBuf
	if s := ncclGetUniqueId(&id); s != ncclSuccess {
		t.Fatal(s)
	}
	parts := make([][]float32, ranks)
	for r := range parts {
		parts[r] = rankValues(r, n*ranks)
	}
	onDevices(t, ranks, func(r int) {
		var comm unsafe.Pointer
		if s := ncclCommInitRank(&comm, ranks, id, cInt(r)); s != ncclSuccess {
			t.Errorf("rank %d: ncclCommInitRank: %d", r, s)
			return
		}
		defer ncclCommDestroy(comm)
		var count, dev, rank cInt
		ncclCommCount(comm, &count)
		ncclCommCuDevice(comm, &dev)
		ncclCommUserRank(comm, &rank)
		if count != ranks || dev != cInt(r) || rank != cInt(r) {
			t.Errorf("rank %d: count %d, device %d, rank %d", r, count, dev, rank)
		}
		s, err := MakeStream(DefaultStream)
		if err != nil {
			t.Error(err)
			return
		}
		stream := s.C()
		for _, op := range []int{redSum, redProd, redMax, redMin} {
			send := devFloats(t, parts[r][:n])
			recv := devFloats(t, make([]float32, n))
			if st := ncclAllReduce(ptr(send), ptr(recv), n, 7, cInt(op), comm, stream); st != ncclSuccess {
				t.Errorf("rank %d: ncclAllReduce op %d: %d", r, op, st)
			}
			cut := make([][]float32, ranks)
			for q := range cut {
				cut[q] = parts[q][:n]
			}
			sameBits(t, fmt.Sprintf("rank %d all-reduce op %d", r, op), hostFloats(t, recv, n), reference(cut, op))
			// In place, on the null stream.
			if st := ncclAllReduce(ptr(send), ptr(send), n, 7, cInt(op), comm, nil); st != ncclSuccess {
				t.Errorf("rank %d: in-place ncclAllReduce: %d", r, st)
			}
			sameBits(t, fmt.Sprintf("rank %d in-place all-reduce op %d", r, op), hostFloats(t, send, n), reference(cut, op))
		}
		// Reduce-scatter: rank r gets the sum of every rank's r-th chunk.
		send := devFloats(t, parts[r])
		recv := devFloats(t, make([]float32, n))
		if st := ncclReduceScatter(ptr(send), ptr(recv), n, 7, redSum, comm, stream); st != ncclSuccess {
			t.Errorf("rank %d: ncclReduceScatter: %d", r, st)
		}
		chunks := make([][]float32, ranks)
		for q := range chunks {
			chunks[q] = parts[q][r*n : (r+1)*n]
		}
		sameBits(t, fmt.Sprintf("rank %d reduce-scatter", r), hostFloats(t, recv, n), reference(chunks, redSum))
		// All-gather, in place: rank r's send is its chunk of recv.
		all := devFloats(t, make([]float32, n*ranks))
		if err := MemcpyHtoD(all+DevicePtr(4*n*r), unsafe.Pointer(&parts[r][0]), 4*n); err != nil {
			t.Error(err)
		}
		if st := ncclAllGather(ptr(all+DevicePtr(4*n*r)), ptr(all), n, 7, comm, stream); st != ncclSuccess {
			t.Errorf("rank %d: ncclAllGather: %d", r, st)
		}
		var want []float32
		for q := range ranks {
			want = append(want, parts[q][:n]...)
		}
		sameBits(t, fmt.Sprintf("rank %d all-gather", r), hostFloats(t, all, n*ranks), want)
		// Broadcast from rank 1 (float64 as bytes: any type moves).
		buf := devFloats(t, parts[r][:2*n])
		if st := ncclBroadcast(ptr(buf), ptr(buf), n, 8, 1, comm, stream); st != ncclSuccess {
			t.Errorf("rank %d: ncclBroadcast: %d", r, st)
		}
		sameBits(t, fmt.Sprintf("rank %d broadcast", r), hostFloats(t, buf, 2*n), parts[1][:2*n])
	})
}

// TestNCCLDisagreement: ranks that call different collectives, or the same with another
// count, reduction or root, all get ncclInvalidUsage, and ncclGetLastError says what each
// asked for; the communicator goes on working afterwards.
func TestNCCLDisagreement(t *testing.T) {
	withDevices(t, 2)
	for _, c := range []struct {
		name string
		call func(r int, p unsafe.Pointer, comm unsafe.Pointer) cInt
	}{
		{"count", func(r int, p, comm unsafe.Pointer) cInt { return ncclAllReduce(p, p, cSize(4+r), 7, redSum, comm, nil) }},
		{"op", func(r int, p, comm unsafe.Pointer) cInt {
			return ncclAllReduce(p, p, 4, 7, cInt(redSum+2*r), comm, nil)
		}},
		{"type", func(r int, p, comm unsafe.Pointer) cInt { return ncclAllReduce(p, p, 2, cInt(7+r), redSum, comm, nil) }},
		{"collective", func(r int, p, comm unsafe.Pointer) cInt {
			if r == 0 {
				return ncclAllReduce(p, p, 4, 7, redSum, comm, nil)
			}
			return ncclBroadcast(p, p, 4, 7, 0, comm, nil)
		}},
		{"root", func(r int, p, comm unsafe.Pointer) cInt { return ncclBroadcast(p, p, 4, 7, cInt(r), comm, nil) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var id ncclIDBuf
			ncclGetUniqueId(&id)
			onDevices(t, 2, func(r int) {
				var comm unsafe.Pointer
				if s := ncclCommInitRank(&comm, 2, id, cInt(r)); s != ncclSuccess {
					t.Errorf("rank %d: init: %d", r, s)
					return
				}
				defer ncclCommDestroy(comm)
				p := devFloats(t, []float32{1, 2, 3, 4, 5, 6, 7, 8})
				if s := c.call(r, ptr(p), comm); s != ncclInvalidUsage {
					t.Errorf("rank %d: status %d, want ncclInvalidUsage", r, s)
				}
				if msg := goString(ncclGetLastError(comm)); !strings.Contains(msg, "rank 0 called") || !strings.Contains(msg, ", rank 1 called") {
					t.Errorf("rank %d: last error %q", r, msg)
				}
				if s := ncclAllReduce(ptr(p), ptr(p), 8, 7, redSum, comm, nil); s != ncclSuccess {
					t.Errorf("rank %d: the next collective: %d", r, s)
				}
				sameBits(t, "after the disagreement", hostFloats(t, p, 2), []float32{2, 4})
			})
		})
	}
}

// TestNCCLInitAllGroup: one thread drives both ranks of ncclCommInitAll through a group (the
// single-process form of NCCL), with each rank's buffers on its device.
func TestNCCLInitAllGroup(t *testing.T) {
	withDevices(t, 2)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	comms := make([]unsafe.Pointer, 2)
	if s := ncclCommInitAll(&comms[0], 2, nil); s != ncclSuccess {
		t.Fatal(s)
	}
	var bufs []DevicePtr
	for r := range 2 {
		ctx, err := Device(r).MakeContext(SchedBlockingSync)
		if err != nil {
			t.Fatal(err)
		}
		defer ctx.Destroy()
		bufs = append(bufs, devFloats(t, []float32{float32(r + 1), 10}))
	}
	ncclGroupStart()
	for r, c := range comms {
		if s := ncclAllReduce(ptr(bufs[r]), ptr(bufs[r]), 2, 7, redMax, c, nil); s != ncclSuccess {
			t.Fatalf("rank %d: %d", r, s)
		}
	}
	if s := ncclGroupEnd(); s != ncclSuccess {
		t.Fatal(s)
	}
	mu.Lock()
	for r := range 2 {
		got := unsafe.Slice((*float32)(unsafe.Pointer(&deviceRangeLocked("test", Device(r), bufs[r], 8)[0])), 2)
		if got[0] != 2 || got[1] != 10 {
			t.Errorf("rank %d: %v, want [2 10]", r, got)
		}
	}
	mu.Unlock()
	for _, c := range comms {
		ncclCommDestroy(c)
	}
	if s := ncclGroupEnd(); s != ncclInvalidUsage {
		t.Errorf("ncclGroupEnd without a group: %d", s)
	}
	dup := make([]unsafe.Pointer, 2)
	devs := []cInt{1, 1}
	if s := ncclCommInitAll(&dup[0], 2, &devs[0]); s != ncclInvalidUsage {
		t.Errorf("two ranks on one device: %d, want ncclInvalidUsage", s)
	}
}

// TestNCCLAbort: a rank waiting for a rank that never comes is released by ncclCommAbort
// with ncclRemoteError; a stream of another device is a violation.
func TestNCCLAbort(t *testing.T) {
	withDevices(t, 2)
	comms := make([]unsafe.Pointer, 2)
	if s := ncclCommInitAll(&comms[0], 2, nil); s != ncclSuccess {
		t.Fatal(s)
	}
	onDevices(t, 1, func(int) {
		p := devFloats(t, []float32{1})
		done := make(chan cInt)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			// Rank 0's device is the thread's; the call blocks for rank 1.
			done <- ncclAllReduce(ptr(p), ptr(p), 1, 7, redSum, comms[0], nil)
		}()
		ncclCommAbort(comms[1])
		if s := <-done; s != ncclRemoteError {
			t.Errorf("after the abort: %d, want ncclRemoteError", s)
		}
		ncclCommDestroy(comms[0])
	})
	onDevices(t, 2, func(r int) {
		if r != 1 {
			return
		}
		s, _ := MakeStream(DefaultStream)
		var id ncclIDBuf
		ncclGetUniqueId(&id)
		var comm unsafe.Pointer
		if st := ncclCommInitRank(&comm, 1, id, 0); st != ncclSuccess {
			t.Error(st)
			return
		}
		defer ncclCommDestroy(comm)
		p := devFloats(t, []float32{1})
		for _, bad := range []struct {
			stream unsafe.Pointer
			p      unsafe.Pointer
			want   string
		}{
			{unsafe.Pointer(&id), ptr(p), "is not a stream handle"},
			{s.C(), ptr(p + 4), "runs past its end"},
		} {
			func() {
				defer func() {
					if msg := fmt.Sprint(recover()); !strings.Contains(msg, bad.want) {
						t.Errorf("panic %q, want %q", msg, bad.want)
					}
				}()
				ncclAllReduce(bad.p, bad.p, 1, 7, redSum, comm, bad.stream)
			}()
		}
	})
}
