package cu

/*
#include <stdlib.h>
typedef struct { char internal[128]; } ncclUniqueId;
*/
import "C"

import (
	"fmt"
	"math"
	"sync"
	"syscall"
	"unsafe"
)

// The libnccl stand-in: the C entry points of NCCL 2.x that package cuda binds, defined here so
// that a program built against the emulator runs its collectives on emulated devices. Package
// cuda declares them weak and uses these definitions when they are linked (as here), else
// dlopens libnccl.so.2.
//
// A communicator belongs to a device (the calling thread's current context's at
// ncclCommInitRank; devlist's at ncclCommInitAll), and its buffers and stream must be memory
// and a stream of a context on that device, or the call panics as the emulator's driver calls
// do. A collective waits until every rank of the communicator has issued its collective of the
// same sequence number, then the last one to arrive computes it for all in rank order
// (rank 0 op rank 1 op …, the arithmetic of package collective's host reductions), so results
// are bit-identical on every rank and from run to run. Ranks that disagree (another
// collective, count, type, reduction or root) all get ncclInvalidUsage; ncclGetLastError says
// why. Inside ncclGroupStart/ncclGroupEnd the calls return at once and ncclGroupEnd waits for
// them, which lets one thread drive every rank of ncclCommInitAll. Like NCCL, a rank that
// never arrives leaves the others waiting, until ncclCommAbort.

// NCCL's status codes (ncclResult_t).
const (
	ncclSuccess         = 0
	ncclSystemError     = 2
	ncclInternalError   = 3
	ncclInvalidArgument = 4
	ncclInvalidUsage    = 5
	ncclRemoteError     = 6
)

// ncclVersion is the NCCL_VERSION_CODE reported (2.19.3, whose API this follows).
const ncclVersion = 21903

var ncclStatusText = map[C.int]string{
	ncclSuccess:         "no error",
	1:                   "unhandled cuda error",
	ncclSystemError:     "unhandled system error",
	ncclInternalError:   "internal error",
	ncclInvalidArgument: "invalid argument",
	ncclInvalidUsage:    "invalid usage",
	ncclRemoteError:     "remote process exited or there was a network error",
	7:                   "NCCL operation in progress",
}

// ncclTypeSize is the byte size of each ncclDataType_t (int8, uint8, int32, uint32, int64,
// uint64, float16, float32, float64, bfloat16).
var ncclTypeSize = map[C.int]int{0: 1, 1: 1, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2}

// The reductions computed (ncclRedOp_t): sum, prod, max, min. ncclAvg and the 16-bit float
// types are not.
const (
	redSum  = 0
	redProd = 1
	redMax  = 2
	redMin  = 3
)

// ncclComm is the state behind one ncclComm_t.
type ncclComm struct {
	cl      *clique
	rank    int
	dev     Device
	seq     int    // collectives issued so far
	lastErr string // why the last call failed
	errC    unsafe.Pointer
}

// clique is the ranks of one communicator.
type clique struct {
	members []*ncclComm // by rank
	joined  int
	ready   chan struct{} // closed when every rank has joined
	ops     map[int]*collOp
	abort   chan struct{} // closed by ncclCommAbort
	aborted bool
}

// collOp is one collective: what the first rank to issue it asked for, each rank's buffers,
// and its outcome.
type collOp struct {
	kind                string
	count               int64
	dtype, redop, root  C.int
	send, recv          []DevicePtr // by rank
	arrived             int
	done                chan struct{}
	status              C.int
	detail              string
	firstRank, lastRank int
}

var (
	ncclMu     sync.Mutex // guards the NCCL state below; taken before mu, never while holding it
	ncclIDs    int
	forming    = map[string]*clique{}           // unique id -> communicator still being joined
	issued     = map[string]bool{}              // ids ncclGetUniqueId gave out
	comms      = map[unsafe.Pointer]*ncclComm{} // live handles
	groupDepth = map[int]int{}                  // OS thread -> ncclGroupStart nesting
	grouped    = map[int][]groupedOp{}          // OS thread -> collectives issued in its group
	statusC    = map[C.int]*C.char{}
)

// The C types of the entry points, named for the tests (which cannot use cgo).
type (
	cInt      = C.int
	cSize     = C.size_t
	ncclIDBuf = C.ncclUniqueId
)

func goString(p *C.char) string { return C.GoString(p) }

type groupedOp struct {
	c  *ncclComm
	op *collOp
}

//export ncclGetVersion
func ncclGetVersion(version *C.int) C.int {
	if version == nil {
		return ncclInvalidArgument
	}
	*version = ncclVersion
	return ncclSuccess
}

//export ncclGetErrorString
func ncclGetErrorString(result C.int) *C.char {
	ncclMu.Lock()
	defer ncclMu.Unlock()
	s, ok := statusC[result]
	if !ok {
		text, known := ncclStatusText[result]
		if !known {
			text = "unknown result code"
		}
		s = C.CString(text)
		statusC[result] = s
	}
	return s
}

// ncclGetLastError returns why comm's last call failed ("" if none did).
//
//export ncclGetLastError
func ncclGetLastError(comm unsafe.Pointer) *C.char {
	ncclMu.Lock()
	defer ncclMu.Unlock()
	c := comms[comm]
	if c == nil {
		return ncclGetEmpty()
	}
	if c.errC != nil {
		C.free(c.errC)
	}
	c.errC = unsafe.Pointer(C.CString(c.lastErr))
	return (*C.char)(c.errC)
}

var emptyC *C.char

func ncclGetEmpty() *C.char {
	if emptyC == nil {
		emptyC = C.CString("")
	}
	return emptyC
}

//export ncclGetUniqueId
func ncclGetUniqueId(id *C.ncclUniqueId) C.int {
	if id == nil {
		return ncclInvalidArgument
	}
	ncclMu.Lock()
	defer ncclMu.Unlock()
	ncclIDs++
	var b [128]byte
	copy(b[:], fmt.Sprintf("cuemu-nccl-%d-%d", syscall.Getpid(), ncclIDs))
	issued[string(b[:])] = true
	*(*[128]byte)(unsafe.Pointer(id)) = b
	return ncclSuccess
}

// newHandleLocked gives c a handle (C memory, so C may hold it).
func newHandleLocked(c *ncclComm) unsafe.Pointer {
	h := C.malloc(1)
	comms[h] = c
	return h
}

// joinLocked adds c to cl as rank c.rank, or says why it cannot join.
func (cl *clique) joinLocked(c *ncclComm) string {
	if cl.members[c.rank] != nil {
		return fmt.Sprintf("rank %d joined twice", c.rank)
	}
	for _, m := range cl.members {
		if m != nil && m.dev == c.dev {
			return fmt.Sprintf("ranks %d and %d on the same device %d (NCCL: duplicate GPU)", m.rank, c.rank, int(c.dev))
		}
	}
	c.cl = cl
	cl.members[c.rank] = c
	if cl.joined++; cl.joined == len(cl.members) {
		close(cl.ready)
	}
	return ""
}

func newClique(n int) *clique {
	return &clique{members: make([]*ncclComm, n), ready: make(chan struct{}), ops: map[int]*collOp{}, abort: make(chan struct{})}
}

// ncclCommInitRank joins rank of nranks to the communicator id on the device of the calling
// thread's current context, and returns when every rank has joined.
//
//export ncclCommInitRank
func ncclCommInitRank(out *unsafe.Pointer, nranks C.int, id C.ncclUniqueId, rank C.int) C.int {
	if out == nil || nranks < 1 || rank < 0 || rank >= nranks {
		return ncclInvalidArgument
	}
	tid := syscall.Gettid()
	dev := currentDevice("ncclCommInitRank")
	key := string(C.GoBytes(unsafe.Pointer(&id), 128))
	ncclMu.Lock()
	if groupDepth[tid] > 0 {
		ncclMu.Unlock()
		return ncclInvalidUsage // not emulated: ncclCommInitAll is the one-thread form
	}
	if !issued[key] {
		ncclMu.Unlock()
		return ncclInvalidArgument
	}
	cl := forming[key]
	if cl == nil {
		cl = newClique(int(nranks))
		forming[key] = cl
	}
	if len(cl.members) != int(nranks) {
		ncclMu.Unlock()
		return ncclInvalidUsage
	}
	c := &ncclComm{rank: int(rank), dev: dev}
	if why := cl.joinLocked(c); why != "" {
		ncclMu.Unlock()
		return ncclInvalidUsage
	}
	if cl.joined == len(cl.members) {
		delete(forming, key)
		delete(issued, key) // ids are single-use
	}
	*out = newHandleLocked(c)
	ncclMu.Unlock()
	<-cl.ready
	return ncclSuccess
}

// ncclCommInitAll creates the ndev ranks of one communicator at once, rank i on device
// devlist[i] (device i when devlist is NULL).
//
//export ncclCommInitAll
func ncclCommInitAll(out *unsafe.Pointer, ndev C.int, devlist *C.int) C.int {
	if out == nil || ndev < 1 {
		return ncclInvalidArgument
	}
	outs := unsafe.Slice(out, int(ndev))
	var devs []C.int
	if devlist != nil {
		devs = unsafe.Slice(devlist, int(ndev))
	}
	ncclMu.Lock()
	defer ncclMu.Unlock()
	cl := newClique(int(ndev))
	for r := range outs {
		d := Device(r)
		if devs != nil {
			d = Device(devs[r])
		}
		if int(d) < 0 || int(d) >= config.devices {
			return ncclInvalidArgument
		}
		if why := cl.joinLocked(&ncclComm{rank: r, dev: d}); why != "" {
			return ncclInvalidUsage
		}
	}
	for r, c := range cl.members {
		outs[r] = newHandleLocked(c)
	}
	return ncclSuccess
}

// currentDevice is the device of the calling thread's current context (it panics without one).
func currentDevice(call string) Device {
	mu.Lock()
	defer mu.Unlock()
	return currentLocked(call).device
}

func lookupComm(comm unsafe.Pointer) *ncclComm {
	ncclMu.Lock()
	defer ncclMu.Unlock()
	return comms[comm]
}

//export ncclCommCount
func ncclCommCount(comm unsafe.Pointer, count *C.int) C.int {
	c := lookupComm(comm)
	if c == nil || count == nil {
		return ncclInvalidArgument
	}
	*count = C.int(len(c.cl.members))
	return ncclSuccess
}

//export ncclCommCuDevice
func ncclCommCuDevice(comm unsafe.Pointer, device *C.int) C.int {
	c := lookupComm(comm)
	if c == nil || device == nil {
		return ncclInvalidArgument
	}
	*device = C.int(c.dev)
	return ncclSuccess
}

//export ncclCommUserRank
func ncclCommUserRank(comm unsafe.Pointer, rank *C.int) C.int {
	c := lookupComm(comm)
	if c == nil || rank == nil {
		return ncclInvalidArgument
	}
	*rank = C.int(c.rank)
	return ncclSuccess
}

// release drops a handle (ncclCommDestroy, ncclCommAbort).
func release(comm unsafe.Pointer, abort bool) C.int {
	ncclMu.Lock()
	defer ncclMu.Unlock()
	c := comms[comm]
	if c == nil {
		return ncclInvalidArgument
	}
	delete(comms, comm)
	C.free(comm)
	if c.errC != nil {
		C.free(c.errC)
	}
	if abort && !c.cl.aborted {
		c.cl.aborted = true
		close(c.cl.abort)
	}
	return ncclSuccess
}

//export ncclCommDestroy
func ncclCommDestroy(comm unsafe.Pointer) C.int { return release(comm, false) }

// ncclCommAbort releases comm and makes the collectives its ranks wait in return
// ncclRemoteError: the way out when a rank failed. It may run on any thread.
//
//export ncclCommAbort
func ncclCommAbort(comm unsafe.Pointer) C.int { return release(comm, true) }

//export ncclGroupStart
func ncclGroupStart() C.int {
	ncclMu.Lock()
	defer ncclMu.Unlock()
	groupDepth[syscall.Gettid()]++
	return ncclSuccess
}

//export ncclGroupEnd
func ncclGroupEnd() C.int {
	tid := syscall.Gettid()
	ncclMu.Lock()
	if groupDepth[tid] == 0 {
		ncclMu.Unlock()
		return ncclInvalidUsage
	}
	if groupDepth[tid]--; groupDepth[tid] > 0 {
		ncclMu.Unlock()
		return ncclSuccess
	}
	delete(groupDepth, tid)
	ops := grouped[tid]
	delete(grouped, tid)
	ncclMu.Unlock()
	status := C.int(ncclSuccess)
	for _, g := range ops {
		if s := wait(g.c, g.op); status == ncclSuccess {
			status = s
		}
	}
	return status
}

//export ncclAllReduce
func ncclAllReduce(send, recv unsafe.Pointer, count C.size_t, dtype, op C.int, comm, stream unsafe.Pointer) C.int {
	return collective("ncclAllReduce", send, recv, count, dtype, op, 0, comm, stream)
}

//export ncclReduceScatter
func ncclReduceScatter(send, recv unsafe.Pointer, recvcount C.size_t, dtype, op C.int, comm, stream unsafe.Pointer) C.int {
	return collective("ncclReduceScatter", send, recv, recvcount, dtype, op, 0, comm, stream)
}

//export ncclAllGather
func ncclAllGather(send, recv unsafe.Pointer, sendcount C.size_t, dtype C.int, comm, stream unsafe.Pointer) C.int {
	return collective("ncclAllGather", send, recv, sendcount, dtype, 0, 0, comm, stream)
}

//export ncclBroadcast
func ncclBroadcast(send, recv unsafe.Pointer, count C.size_t, dtype, root C.int, comm, stream unsafe.Pointer) C.int {
	return collective("ncclBroadcast", send, recv, count, dtype, 0, root, comm, stream)
}

// collective checks one rank's call, records it and, outside a group, waits for its result.
func collective(kind string, send, recv unsafe.Pointer, count C.size_t, dtype, redop, root C.int, comm, stream unsafe.Pointer) C.int {
	c := lookupComm(comm)
	if c == nil {
		return ncclInvalidArgument
	}
	size := len(c.cl.members)
	fail := func(status C.int, format string, args ...any) C.int {
		ncclMu.Lock()
		c.lastErr = kind + ": " + fmt.Sprintf(format, args...)
		ncclMu.Unlock()
		return status
	}
	ts, ok := ncclTypeSize[dtype]
	if !ok {
		return fail(ncclInvalidArgument, "unknown data type %d", int(dtype))
	}
	reduces := kind == "ncclAllReduce" || kind == "ncclReduceScatter"
	if reduces && (dtype == 6 || dtype == 9 || redop < redSum || redop > redMin) {
		return fail(ncclInvalidArgument, "reduction %d on data type %d is not emulated", int(redop), int(dtype))
	}
	if kind == "ncclBroadcast" && (root < 0 || int(root) >= size) {
		return fail(ncclInvalidArgument, "root %d of %d ranks", int(root), size)
	}
	if count == 0 {
		return ncclSuccess
	}
	if uint64(count) > math.MaxInt64/uint64(ts*size) {
		return fail(ncclInvalidArgument, "count %d is larger than any device memory", uint64(count))
	}
	n := int64(count) * int64(ts)
	sendN, recvN := n, n
	switch kind {
	case "ncclReduceScatter":
		sendN *= int64(size)
	case "ncclAllGather":
		recvN *= int64(size)
	}
	c.check(kind, send, recv, sendN, recvN, kind != "ncclBroadcast" || int(root) == c.rank, stream)

	tid := syscall.Gettid()
	ncclMu.Lock()
	cl := c.cl
	seq := c.seq
	c.seq++
	op := cl.ops[seq]
	if op == nil {
		op = &collOp{kind: kind, count: int64(count), dtype: dtype, redop: redop, root: root,
			send: make([]DevicePtr, size), recv: make([]DevicePtr, size), done: make(chan struct{}), firstRank: c.rank}
		cl.ops[seq] = op
	} else if op.status == ncclSuccess && (op.kind != kind || op.count != int64(count) || op.dtype != dtype || op.redop != redop || op.root != root) {
		op.status = ncclInvalidUsage
		first := fmt.Sprintf("rank %d called %s(count %d, type %d, op %d, root %d)", op.firstRank, op.kind, op.count, int(op.dtype), int(op.redop), int(op.root))
		this := fmt.Sprintf("rank %d called %s(count %d, type %d, op %d, root %d)", c.rank, kind, int64(count), int(dtype), int(redop), int(root))
		if c.rank < op.firstRank {
			first, this = this, first
		}
		op.detail = fmt.Sprintf("collective %d: the ranks disagree: %s, %s", seq, first, this)
	}
	op.send[c.rank], op.recv[c.rank] = DevicePtr(uintptr(send)), DevicePtr(uintptr(recv))
	if op.arrived++; op.arrived == size {
		delete(cl.ops, seq)
		if op.status == ncclSuccess {
			cl.runLocked(op)
		}
		close(op.done)
	}
	if groupDepth[tid] > 0 {
		grouped[tid] = append(grouped[tid], groupedOp{c, op})
		ncclMu.Unlock()
		return ncclSuccess
	}
	ncclMu.Unlock()
	return wait(c, op)
}

// check panics unless stream is null or a live stream of c's device, and the buffers lie in
// memory of that device (send only when the call reads it).
func (c *ncclComm) check(kind string, send, recv unsafe.Pointer, sendN, recvN int64, reads bool, stream unsafe.Pointer) {
	mu.Lock()
	defer mu.Unlock()
	if stream != nil {
		sc, ok := streamHandles[stream]
		switch {
		case !ok:
			violation("%s: %p is not a stream handle", kind, stream)
		case !sc.c.live:
			violation("%s: stream of destroyed context %d", kind, sc.c.id)
		case sc.c.device != c.dev:
			violation("%s: stream of device %d for a communicator rank on device %d", kind, int(sc.c.device), int(c.dev))
		}
	}
	if reads {
		deviceRangeLocked(kind+" (send)", c.dev, DevicePtr(uintptr(send)), sendN)
	}
	deviceRangeLocked(kind+" (recv)", c.dev, DevicePtr(uintptr(recv)), recvN)
}

// wait returns op's status once every rank has issued it, or ncclRemoteError when the
// communicator is aborted first.
func wait(c *ncclComm, op *collOp) C.int {
	select {
	case <-op.done:
	case <-c.cl.abort:
		select {
		case <-op.done:
		default:
			ncclMu.Lock()
			c.lastErr = op.kind + ": the communicator was aborted"
			ncclMu.Unlock()
			return ncclRemoteError
		}
	}
	if op.status != ncclSuccess {
		ncclMu.Lock()
		c.lastErr = op.detail
		ncclMu.Unlock()
	}
	return op.status
}

// runLocked computes op for every rank, in rank order, with the device memory as it is now
// (every rank's call has completed its checks; a buffer freed since is a violation).
func (cl *clique) runLocked(op *collOp) {
	mu.Lock()
	defer mu.Unlock()
	size := len(cl.members)
	ts := int64(ncclTypeSize[op.dtype])
	n := op.count * ts
	bytes := func(which string, r int, p DevicePtr, m int64) []byte {
		return deviceRangeLocked(fmt.Sprintf("%s (rank %d %s)", op.kind, r, which), cl.members[r].dev, p, m)
	}
	switch op.kind {
	case "ncclAllReduce":
		srcs := make([][]byte, size)
		for r := range size {
			srcs[r] = bytes("send", r, op.send[r], n)
		}
		out := reduceBytes(op.dtype, op.redop, srcs)
		for r := range size {
			copy(bytes("recv", r, op.recv[r], n), out)
		}
	case "ncclReduceScatter":
		outs := make([][]byte, size)
		for q := range size {
			srcs := make([][]byte, size)
			for r := range size {
				srcs[r] = bytes("send", r, op.send[r], n*int64(size))[int64(q)*n : int64(q+1)*n]
			}
			outs[q] = reduceBytes(op.dtype, op.redop, srcs)
		}
		for q := range size {
			copy(bytes("recv", q, op.recv[q], n), outs[q])
		}
	case "ncclAllGather":
		all := make([]byte, 0, n*int64(size))
		for r := range size {
			all = append(all, bytes("send", r, op.send[r], n)...)
		}
		for r := range size {
			copy(bytes("recv", r, op.recv[r], n*int64(size)), all)
		}
	case "ncclBroadcast":
		root := int(op.root)
		data := append([]byte(nil), bytes("send", root, op.send[root], n)...)
		for r := range size {
			copy(bytes("recv", r, op.recv[r], n), data)
		}
	}
}

// reduceBytes reduces the ranks' values, srcs[0] op srcs[1] op …, element by element.
func reduceBytes(dtype, redop C.int, srcs [][]byte) []byte {
	switch dtype {
	case 0:
		return reduceAs[int8](redop, srcs)
	case 1:
		return reduceAs[uint8](redop, srcs)
	case 2:
		return reduceAs[int32](redop, srcs)
	case 3:
		return reduceAs[uint32](redop, srcs)
	case 4:
		return reduceAs[int64](redop, srcs)
	case 5:
		return reduceAs[uint64](redop, srcs)
	case 7:
		return reduceAs[float32](redop, srcs)
	case 8:
		return reduceAs[float64](redop, srcs)
	}
	panic("cuemu: reduceBytes: data type checked before")
}

type number interface {
	~int8 | ~uint8 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64
}

// reduceAs is reduceBytes for element type T: max and min are NaN when either value is (for
// floats), as in package collective.
func reduceAs[T number](redop C.int, srcs [][]byte) []byte {
	var zero T
	sz := int(unsafe.Sizeof(zero))
	out := make([]byte, len(srcs[0]))
	if len(out) == 0 {
		return out
	}
	acc := make([]T, len(out)/sz)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&acc[0])), len(out)), srcs[0])
	x := make([]T, len(acc))
	xb := unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), len(out))
	for _, s := range srcs[1:] {
		copy(xb, s)
		for i, v := range x {
			a := acc[i]
			switch redop {
			case redSum:
				a += v
			case redProd:
				a *= v
			case redMax:
				if isNaN(a) || isNaN(v) {
					a = nan[T]()
				} else {
					a = max(a, v)
				}
			case redMin:
				if isNaN(a) || isNaN(v) {
					a = nan[T]()
				} else {
					a = min(a, v)
				}
			}
			acc[i] = a
		}
	}
	copy(out, unsafe.Slice((*byte)(unsafe.Pointer(&acc[0])), len(out)))
	return out
}

func isNaN[T number](v T) bool { return v != v }

// nan is package collective's NaN (math.NaN converted) for float type T; integer types have
// none, and isNaN never lets it be called for them.
func nan[T number]() T { return T(math.NaN()) }
