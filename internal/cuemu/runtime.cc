// runtime.cc: the block scheduler of the emulator. Every thread of a block is a fiber with its
// own stack; the scheduler runs each runnable fiber until it reaches a barrier, a warp shuffle
// or its end, then completes whatever can complete (whole warps at a shuffle, then the whole
// block at a barrier) and repeats. Anything else is a kernel bug that would hang or be undefined
// on a GPU (a barrier that some threads skip, a shuffle with a missing lane), and aborts the
// launch with a message naming the kernel, the block and the threads.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include <mutex>
#include <string>
#include <vector>

#include "cuemu.h"
#include "runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#define CUEMU_ASAN 1
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

extern "C" void cuemu_switch(void** save_sp, void* to_sp);
extern "C" void cuemu_fiber_start(void);

// The linker brackets the section that __shared__ statics live in (weak: a binary may have none).
extern "C" char __start_cuemu_shared[] __attribute__((weak));
extern "C" char __stop_cuemu_shared[] __attribute__((weak));

namespace cuemu {

Thread* current;

static Kernel* registry;

void register_kernel(Kernel* k) {
    k->next = registry;
    registry = k;
}

namespace {

enum State { kRunnable, kBarrier, kShuffle, kDone };

// The kinds of warp exchange (Fiber::shfl_kind).
enum { kXor, kIdx, kGather };
const char* const kind_name[] = {"__shfl_xor_sync", "__shfl_sync", "cuemu_warp_gather"};

const char* state_name(State s) {
    switch (s) {
    case kRunnable:
        return "running";
    case kBarrier:
        return "waiting at __syncthreads";
    case kShuffle:
        return "waiting at a shuffle";
    default:
        return "exited";
    }
}

struct Fiber {
    Thread t;
    State state;
    void* sp;
    char* stack;  // kStackBytes above a guard page
    void* asan_fake;
    uint64_t shfl_in, shfl_out;
    int shfl_size, shfl_lane;  // the xor mask or the source lane
    int shfl_kind;             // kXor, kIdx or kGather
    const void* gather_in;     // kGather: this lane's shfl_size bytes
    void* gather_out;          // kGather: 32·shfl_size bytes, lane order
};

constexpr size_t kStackBytes = 64 << 10;
constexpr size_t kGuardBytes = 4096;

// Fiber stacks are kept across launches; the page below each one is a guard page.
std::vector<char*> stacks;

char* stack_at(size_t i) {
    while (stacks.size() <= i) {
        void* p = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            perror("cuemu: mmap of a fiber stack");
            abort();
        }
        mprotect(p, kGuardBytes, PROT_NONE);
        stacks.push_back((char*)p + kGuardBytes);
    }
    return stacks[i];
}

struct Launch {
    const Kernel* kernel;
    const uint64_t* argv;
    Block block;
    std::vector<Fiber> fibers;
    void* sched_sp;
    const void* sched_bottom;
    size_t sched_size;
    bool failed;
    std::string msg;
};

Launch* L;         // the launch in progress
Fiber* running;    // the fiber in progress, null in the scheduler
std::mutex launch_mu;

void fiber_main(Fiber* f);

void prepare(Fiber* f, char* stack) {
    f->stack = stack;
#ifdef CUEMU_ASAN
    // An earlier, abandoned launch may have left poisoned frames behind.
    __asan_unpoison_memory_region(stack, kStackBytes);
#endif
    // The frame cuemu_switch pops: r15 r14 r13 r12 rbx rbp, then the return address.
    uintptr_t top = ((uintptr_t)stack + kStackBytes) & ~(uintptr_t)15;
    uint64_t* sp = (uint64_t*)(top - 7 * 8);
    sp[0] = 0;
    sp[1] = 0;
    sp[2] = (uint64_t)(uintptr_t)&fiber_main;
    sp[3] = (uint64_t)(uintptr_t)f;
    sp[4] = 0;
    sp[5] = 0;
    sp[6] = (uint64_t)(uintptr_t)&cuemu_fiber_start;
    f->sp = sp;
    f->asan_fake = nullptr;
}

// resume runs f until it blocks or ends (called by the scheduler).
void resume(Fiber* f) {
    running = f;
    current = &f->t;
#ifdef CUEMU_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f->stack, kStackBytes);
#endif
    cuemu_switch(&L->sched_sp, f->sp);
#ifdef CUEMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    running = nullptr;
    current = nullptr;
}

// suspend returns from the running fiber to the scheduler; an ending fiber never comes back.
void suspend(bool ending) {
    Fiber* f = running;
#ifdef CUEMU_ASAN
    __sanitizer_start_switch_fiber(ending ? nullptr : &f->asan_fake, L->sched_bottom, L->sched_size);
#endif
    cuemu_switch(&f->sp, L->sched_sp);
#ifdef CUEMU_ASAN
    __sanitizer_finish_switch_fiber(f->asan_fake, &L->sched_bottom, &L->sched_size);
#endif
}

void fiber_main(Fiber* f) {
#ifdef CUEMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &L->sched_bottom, &L->sched_size);
#endif
    L->kernel->invoke(L->argv);
    f->state = kDone;
    suspend(true);
    abort();  // an ended fiber is never resumed
}

std::string vformat(const char* fmt, va_list ap) {
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    return buf;
}

std::string format(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = vformat(fmt, ap);
    va_end(ap);
    return s;
}

// fail ends the launch from inside a fiber.
[[noreturn]] void fail(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    L->msg = format("thread (%u,%u,%u): ", running->t.idx.x, running->t.idx.y, running->t.idx.z) + vformat(fmt, ap);
    va_end(ap);
    L->failed = true;
    suspend(true);
    abort();
}

// ranges lists the linear thread indices [lo, hi) in state s as "0-31, 64".
std::string ranges(size_t lo, size_t hi, State s) {
    std::string out;
    size_t i = lo;
    while (i < hi) {
        if (L->fibers[i].state != s) {
            i++;
            continue;
        }
        size_t j = i;
        while (j + 1 < hi && L->fibers[j + 1].state == s) j++;
        if (!out.empty()) out += ", ";
        out += j == i ? format("%zu", i) : format("%zu-%zu", i, j);
        i = j + 1;
    }
    return out;
}

// complete_shuffles finishes every warp whose 32 lanes all wait at a shuffle. It reports false
// with L->msg set when a warp can never finish its shuffle.
bool complete_shuffles(bool* progress) {
    size_t n = L->fibers.size();
    for (size_t lo = 0; lo < n; lo += 32) {
        size_t hi = lo + 32 < n ? lo + 32 : n;
        size_t waiting = 0;
        for (size_t i = lo; i < hi; i++) waiting += L->fibers[i].state == kShuffle;
        if (waiting == 0) continue;
        if (hi - lo < 32) {
            L->msg = format("shuffle with a full mask in the partial warp %zu (threads %zu-%zu of a "
                            "%zu-thread block): lanes %zu-31 do not exist",
                            lo / 32, lo, hi - 1, n, hi - lo);
            return false;
        }
        if (waiting < 32) {
            std::string m = format("shuffle in warp %zu is missing lanes: threads %s wait at the shuffle",
                                   lo / 32, ranges(lo, hi, kShuffle).c_str());
            if (!ranges(lo, hi, kDone).empty()) m += ", threads " + ranges(lo, hi, kDone) + " exited";
            if (!ranges(lo, hi, kBarrier).empty()) {
                m += ", threads " + ranges(lo, hi, kBarrier) + " wait at __syncthreads (deadlock)";
            }
            L->msg = m;
            return false;
        }
        int size = L->fibers[lo].shfl_size;
        int kind = L->fibers[lo].shfl_kind;
        for (size_t i = lo; i < hi; i++) {
            if (L->fibers[i].shfl_size != size) {
                L->msg = format("shuffle in warp %zu: lane 0 exchanges %d bytes, lane %zu %d bytes", lo / 32,
                                size, i - lo, L->fibers[i].shfl_size);
                return false;
            }
            if (L->fibers[i].shfl_kind != kind) {
                L->msg = format("shuffle in warp %zu: lane 0 is at %s, lane %zu at %s", lo / 32, kind_name[kind],
                                i - lo, kind_name[L->fibers[i].shfl_kind]);
                return false;
            }
        }
        for (size_t i = lo; i < hi; i++) {
            Fiber& f = L->fibers[i];
            if (kind == kGather) {
                for (size_t j = lo; j < hi; j++) {
                    memcpy((char*)f.gather_out + (j - lo) * (size_t)size, L->fibers[j].gather_in, (size_t)size);
                }
                continue;
            }
            size_t lane = kind == kXor ? ((i - lo) ^ (size_t)f.shfl_lane) : (size_t)f.shfl_lane;
            f.shfl_out = L->fibers[lo + (lane & 31)].shfl_in;
        }
        for (size_t i = lo; i < hi; i++) L->fibers[i].state = kRunnable;
        *progress = true;
    }
    return true;
}

bool run_block(uint3 idx, int order, bool stale_shared) {
    L->block.idx = idx;
    if (!stale_shared && __start_cuemu_shared != nullptr && __stop_cuemu_shared > __start_cuemu_shared) {
        memset(__start_cuemu_shared, 0xff, (size_t)(__stop_cuemu_shared - __start_cuemu_shared));
    }
    size_t n = L->fibers.size();
    for (size_t i = 0; i < n; i++) {
        Fiber& f = L->fibers[i];
        prepare(&f, stack_at(i));
        f.state = kRunnable;
    }
    for (long barriers = 0;;) {
        for (size_t k = 0; k < n; k++) {
            Fiber* f = &L->fibers[order ? n - 1 - k : k];
            if (f->state != kRunnable) continue;
            resume(f);
            if (L->failed) return false;
        }
        // Every thread now waits at a barrier or a shuffle, or has exited.
        size_t done = 0;
        for (size_t i = 0; i < n; i++) done += L->fibers[i].state == kDone;
        if (done == n) return true;
        bool progress = false;
        if (!complete_shuffles(&progress)) return false;
        if (progress) continue;
        if (done > 0) {
            L->msg = format("__syncthreads #%ld is skipped: threads %s wait at it, threads %s exited", barriers + 1,
                            ranges(0, n, kBarrier).c_str(), ranges(0, n, kDone).c_str());
            return false;
        }
        // No shuffle is pending (complete_shuffles fails on a partial one) and nobody exited:
        // every thread waits at the barrier.
        for (size_t i = 0; i < n; i++) L->fibers[i].state = kRunnable;
        barriers++;
    }
}

}  // namespace

void syncthreads() {
    if (running == nullptr) abort();
    running->state = kBarrier;
    suspend(false);
}

namespace {

// shuffle waits until the whole warp is at a shuffle and returns the bytes of the lane that
// complete_shuffles picked.
void shuffle(void* v, int size, unsigned mask, int lane, int kind, int width) {
    if (running == nullptr) abort();
    const char* name = kind_name[kind];
    if (mask != 0xffffffffu) fail("%s with mask %#x: the emulator supports full-warp masks only", name, mask);
    if (width != 32) fail("%s with width %d: the emulator supports width 32 only", name, width);
    Fiber* f = running;
    memcpy(&f->shfl_in, v, (size_t)size);
    f->shfl_size = size;
    f->shfl_lane = lane;
    f->shfl_kind = kind;
    f->state = kShuffle;
    suspend(false);
    memcpy(v, &f->shfl_out, (size_t)size);
}

}  // namespace

void shfl_xor(void* v, int size, unsigned mask, int lane_mask, int width) { shuffle(v, size, mask, lane_mask, kXor, width); }

// The source lane is taken modulo the width, as on the device.
void shfl_idx(void* v, int size, unsigned mask, int src_lane, int width) { shuffle(v, size, mask, src_lane & 31, kIdx, width); }

void warp_gather(const void* in, int size, void* out) {
    if (running == nullptr) abort();
    Fiber* f = running;
    f->gather_in = in;
    f->gather_out = out;
    f->shfl_size = size;
    f->shfl_kind = kGather;
    f->state = kShuffle;
    suspend(false);
}

}  // namespace cuemu

using cuemu::Kernel;

extern "C" int cuemu_kernel_count(void) {
    int n = 0;
    for (Kernel* k = cuemu::registry; k; k = k->next) n++;
    return n;
}

extern "C" void cuemu_kernel_at(int i, cuemu_kernel_info* out) {
    Kernel* k = cuemu::registry;
    while (i-- > 0 && k) k = k->next;
    memset(out, 0, sizeof *out);
    if (!k) return;
    out->handle = k;
    out->name = k->name;
    out->source = k->source;
    out->param_names = k->param_names;
    out->nparams = k->nparams;
    for (int j = 0; j < k->nparams; j++) {
        out->size[j] = k->size[j];
        out->pointer[j] = k->pointer[j];
    }
}

extern "C" int cuemu_launch(const void* handle, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                            unsigned by, unsigned bz, const uint64_t* argv, int order, char* err,
                            size_t errlen) {
    std::lock_guard<std::mutex> lock(cuemu::launch_mu);
    cuemu::Launch l{};
    l.kernel = (const Kernel*)handle;
    l.argv = argv;
    l.block.dim = {bx, by, bz};
    l.block.grid = {gx, gy, gz};
    size_t n = (size_t)bx * by * bz;
    l.fibers.resize(n);
    for (size_t i = 0; i < n; i++) {
        cuemu::Thread& t = l.fibers[i].t;
        t.idx = {(unsigned)(i % bx), (unsigned)(i / bx % by), (unsigned)(i / ((size_t)bx * by))};
        t.block = &l.block;
    }
    cuemu::L = &l;
    size_t blocks = (size_t)gx * gy * gz;
    int rc = 0;
    for (size_t k = 0; k < blocks; k++) {
        size_t b = (order & 1) ? blocks - 1 - k : k;
        uint3 idx = {(unsigned)(b % gx), (unsigned)(b / gx % gy), (unsigned)(b / ((size_t)gx * gy))};
        if (!cuemu::run_block(idx, order & 1, (order & 2) != 0)) {
            snprintf(err, errlen, "block (%u,%u,%u): %s", idx.x, idx.y, idx.z, l.msg.c_str());
            rc = 1;
            break;
        }
    }
    cuemu::L = nullptr;
    return rc;
}

extern "C" void* cuemu_alloc(size_t bytes) {
    void* p = nullptr;
    if (posix_memalign(&p, 256, bytes ? bytes : 1) != 0) return nullptr;
    memset(p, 0xff, bytes);
    return p;
}

extern "C" void cuemu_free(void* p) { free(p); }
