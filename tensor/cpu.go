package tensor

import "math"

// CPU returns the pure-Go host backend. It is stateless, so every call returns an equal value and
// it needs no Close. Its tensors wrap ordinary Go slices (see FromFloat32), and every op runs the
// pure-Go kernels, parallel over rows with a fixed chunking so results never depend on GOMAXPROCS.
func CPU() Backend { return cpuBackend{} }

type cpuBackend struct{}

type hostStorage []byte

func (hostStorage) Backend() Backend { return cpuBackend{} }
func (s hostStorage) Len() int       { return len(s) }
func (hostStorage) Release() error   { return nil }
func (s hostStorage) Bytes() []byte  { return s }

func (cpuBackend) Name() string { return "cpu" }

// MaxHostBytes is the largest storage the CPU backend allocates: the Go runtime's limit on one
// allocation on 64-bit platforms (2^48 bytes; the whole int range on 32-bit ones). Larger
// requests are ErrParam errors, not runtime panics; functions that size host buffers from
// their arguments (perturb's images and patch grids) refuse sizes above it too. A request
// below it that exceeds the machine's memory still ends the process, as any Go allocation
// does.
const MaxHostBytes = int(min(uint64(1)<<48, uint64(math.MaxInt)))

func (cpuBackend) Alloc(bytes int) (Storage, error) {
	if bytes < 0 || bytes > MaxHostBytes {
		return nil, Errorf(ErrParam, "cpu.Alloc", "bytes", "is %d, want a size in [0, MaxHostBytes = %d]", bytes, MaxHostBytes)
	}
	// Allocate as 8-byte words so every dtype view is aligned.
	words := make([]uint64, bytes/8+min(bytes%8, 1))
	return hostStorage(asBytes(words)[:bytes:bytes]), nil
}

func hostOf(op, arg string, s Storage) ([]byte, error) {
	if s == nil {
		return nil, Errorf(ErrParam, op, arg, "storage is nil")
	}
	hs, ok := s.(HostStorage)
	if !ok {
		return nil, Errorf(ErrBackend, op, arg, "storage belongs to %s, not cpu", s.Backend().Name())
	}
	return hs.Bytes(), nil
}

func (cpuBackend) Upload(dst Storage, off int, src []byte) error {
	const op = "cpu.Upload"
	d, err := hostOf(op, "dst", dst)
	if err != nil {
		return err
	}
	if err := CheckRange(op, "dst", len(d), off, len(src)); err != nil {
		return err
	}
	copy(d[off:], src)
	return nil
}

func (cpuBackend) Download(dst []byte, src Storage, off int) error {
	const op = "cpu.Download"
	s, err := hostOf(op, "src", src)
	if err != nil {
		return err
	}
	if err := CheckRange(op, "src", len(s), off, len(dst)); err != nil {
		return err
	}
	copy(dst, s[off:])
	return nil
}

func (cpuBackend) Copy(dst Storage, dstOff int, src Storage, srcOff, n int) error {
	const op = "cpu.Copy"
	d, err := hostOf(op, "dst", dst)
	if err != nil {
		return err
	}
	s, err := hostOf(op, "src", src)
	if err != nil {
		return err
	}
	if err := CheckRange(op, "dst", len(d), dstOff, n); err != nil {
		return err
	}
	if err := CheckRange(op, "src", len(s), srcOff, n); err != nil {
		return err
	}
	copy(d[dstOff:dstOff+n], s[srcOff:srcOff+n])
	return nil
}

func (cpuBackend) Sync() error  { return nil }
func (cpuBackend) Close() error { return nil }
