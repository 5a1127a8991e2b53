// runtime.h: the C interface between the Go side of the emulator and runtime.cc.
#ifndef CUEMU_RUNTIME_H
#define CUEMU_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// A compiled kernel as the Go side sees it (a copy of cuemu::Kernel's description).
typedef struct {
    const void* handle;
    const char* name;
    const char* source;
    const char* param_names;
    int nparams;
    int size[32];
    int pointer[32];
} cuemu_kernel_info;

// cuemu_kernel_count and cuemu_kernel_at enumerate the kernels compiled into the binary.
int cuemu_kernel_count(void);
void cuemu_kernel_at(int i, cuemu_kernel_info* out);

// cuemu_launch runs every block of the grid to completion. argv holds one 8-byte slot per
// parameter. order: bit 0 clear runs blocks and threads in index order, set in reverse; bit 1
// set leaves shared memory as the previous block left it (CUEMU_SHARED=stale). On a violation of
// the execution model it returns non-zero with a message in err.
int cuemu_launch(const void* handle, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                 unsigned by, unsigned bz, const uint64_t* argv, int order, char* err,
                 size_t errlen);

// Device memory: host memory from the C allocator (so AddressSanitizer sees kernel accesses),
// 256-byte aligned like cuMemAlloc's, filled with 0xff bytes.
void* cuemu_alloc(size_t bytes);
void cuemu_free(void* p);

#ifdef __cplusplus
}
#endif

#endif
