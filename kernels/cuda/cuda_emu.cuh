/* cuda_emu.cuh - a host emulation of the little of CUDA that cuda_backend.cu
 * uses, for testing the kernels on machines without a GPU (g++
 * -DILPD_CUDA_EMU; see cuda_compat.cuh). The kernels are the very same
 * source as on the GPU; only threadIdx & co, __syncthreads and the warp
 * shuffles come from here.
 *
 * A launch runs its blocks one after the other; the threads of a block are
 * fibers on the calling thread (their own stacks; a 20-instruction context
 * switch on x86-64, ucontext elsewhere), switched round-robin, in thread
 * order on even blocks and in reverse order on odd ones, so that a kernel
 * that reads shared memory another thread writes without a barrier between
 * them gives different results on some blocks. A fiber yields at
 * sync_block() (released when every live thread of the block waits there)
 * and at each warp shuffle (released when every live lane of its warp waits
 * there; values go through a double-buffered slot array). A barrier that
 * can never be released (a divergent __syncthreads or shuffle) aborts with
 * a message: a bug the real GPU would hang on or silently miscompute.
 * Static __shared__ arrays are function statics (one block runs at a time);
 * the dynamic buffer is filled with NaN bytes at each block so that reading
 * shared memory nobody wrote shows in the results. One launch runs at a
 * time in the process (a mutex serialises callers).
 */
#ifndef ILPD_CUDA_EMU_CUH
#define ILPD_CUDA_EMU_CUH

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define EMU_FAST_SWITCH 1
#else
#define EMU_FAST_SWITCH 0
#include <ucontext.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

#if EMU_FAST_SWITCH
/* ilpd_emu_switch(&save_sp, new_sp): saves the callee-saved registers on
 * the current stack (plus an 8-byte pad), stores the stack pointer in
 * *save_sp, switches to new_sp and restores the same from there (System V
 * x86-64 ABI: everything else is caller-saved; the SSE and x87 control
 * words are left alone: no kernel changes rounding modes). */
extern "C" void ilpd_emu_switch(void **save_sp, void *new_sp);
__asm__(".text\n"
        ".globl ilpd_emu_switch\n"
        ".hidden ilpd_emu_switch\n"
        ".type ilpd_emu_switch, @function\n"
        "ilpd_emu_switch:\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  subq $8, %rsp\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  addq $8, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size ilpd_emu_switch, .-ilpd_emu_switch\n");
#endif

namespace ILPD_NS {

enum { EMU_RUN, EMU_WAIT_BLOCK, EMU_WAIT_WARP, EMU_DONE };
enum { EMU_STACK = 256 * 1024, EMU_MAX_THREADS = 1024 };

/* A saved execution context. */
struct emu_ctx {
#if EMU_FAST_SWITCH
    void *sp;
#else
    ucontext_t uc;
#endif
};

struct emu_fiber {
    emu_ctx ctx;
    dim3 tid;
    int state;
    void *stack;
    void *fake; /* ASan's fake stack of the fiber while it is switched out */
};

static emu_fiber emu_fibers[EMU_MAX_THREADS];
static emu_ctx emu_main;
static emu_fiber *emu_cur_fiber;
static int emu_cur_index;
dim3 emu_block_idx, emu_block_dim, emu_grid_dim;
static unsigned char *emu_smem;
static size_t emu_smem_cap, emu_smem_len;
static float emu_slots[2][EMU_MAX_THREADS];
static int emu_slot_gen[EMU_MAX_THREADS / 32];
static void (*emu_body)(void *);
static void *emu_body_arg;
static pthread_mutex_t emu_lock = PTHREAD_MUTEX_INITIALIZER;
#if EMU_ASAN
static void *emu_main_fake;
static const void *emu_main_stack_bottom;
static size_t emu_main_stack_size;
#endif

dim3 &emu_thread_idx() { return emu_cur_fiber->tid; }
void *emu_dyn_smem() { return emu_smem; }

static void emu_entry();

#if EMU_FAST_SWITCH
/* Prepares CTX to start ENTRY on STACK (SIZE bytes) at its first switch. */
static void emu_ctx_init(emu_ctx *c, void *stack, size_t size) {
    uintptr_t top = ((uintptr_t)stack + size) & ~(uintptr_t)15;
    void **sp = reinterpret_cast<void **>(top);
    *--sp = NULL;                                      /* emu_entry's "return address": it never returns */
    *--sp = reinterpret_cast<void *>(&emu_entry);      /* ret of ilpd_emu_switch */
    for (int i = 0; i < 6; i++) *--sp = NULL;          /* rbp rbx r12 r13 r14 r15 */
    *--sp = NULL;                                      /* the pad */
    c->sp = sp;
}
static void emu_ctx_switch(emu_ctx *from, emu_ctx *to) { ilpd_emu_switch(&from->sp, to->sp); }
#else
static void emu_ctx_init(emu_ctx *c, void *stack, size_t size) {
    if (getcontext(&c->uc)) abort();
    c->uc.uc_stack.ss_sp = stack;
    c->uc.uc_stack.ss_size = size;
    c->uc.uc_link = NULL; /* emu_entry switches back itself */
    makecontext(&c->uc, emu_entry, 0);
}
static void emu_ctx_switch(emu_ctx *from, emu_ctx *to) {
    if (swapcontext(&from->uc, &to->uc)) abort();
}
#endif

/* Leaves the current fiber for the scheduler with STATE. */
static void emu_yield(int state) {
    emu_fiber *f = emu_cur_fiber;
    f->state = state;
#if EMU_ASAN
    __sanitizer_start_switch_fiber(&f->fake, emu_main_stack_bottom, emu_main_stack_size);
#endif
    emu_ctx_switch(&f->ctx, &emu_main);
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(f->fake, NULL, NULL);
#endif
}

void emu_sync_block() { emu_yield(EMU_WAIT_BLOCK); }

static float emu_exchange(float v, int o) {
    int lane = emu_cur_index & 31, warp = emu_cur_index >> 5;
    int g = emu_slot_gen[warp] & 1;
    emu_slots[g][emu_cur_index] = v;
    emu_yield(EMU_WAIT_WARP);
    /* released: every live lane wrote its value into generation g */
    int src = (warp << 5) | (lane ^ o);
    return emu_slots[g][src];
}

float emu_shfl_xor(float v, int o) { return emu_exchange(v, o); }
int emu_shfl_xor_i(int v, int o) {
    float f, r;
    memcpy(&f, &v, 4);
    r = emu_exchange(f, o);
    int out;
    memcpy(&out, &r, 4);
    return out;
}

/* Every fiber starts here and, once the kernel body returns, switches back
 * to the scheduler for good. */
static void emu_entry() {
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(NULL, &emu_main_stack_bottom, &emu_main_stack_size);
#endif
    emu_body(emu_body_arg);
    emu_fiber *f = emu_cur_fiber;
    f->state = EMU_DONE;
#if EMU_ASAN
    __sanitizer_start_switch_fiber(NULL, emu_main_stack_bottom, emu_main_stack_size);
#endif
    emu_ctx_switch(&f->ctx, &emu_main);
    abort(); /* a finished fiber is never resumed */
}

/* Runs BODY(ARG) as a kernel over GRID x BLOCK threads with SMEM bytes of
 * dynamic shared memory. Aborts on what would be a hang or an invalid
 * launch on the GPU. */
static void emu_run(dim3 grid, dim3 block, size_t smem, void (*body)(void *), void *arg) {
    int nthr = (int)(block.x * block.y * block.z);
    if (nthr < 1 || nthr > EMU_MAX_THREADS || block.y != 1 || block.z != 1) {
        fprintf(stderr, "cuda-emu: unsupported block shape %ux%ux%u\n", block.x, block.y, block.z);
        abort();
    }
    pthread_mutex_lock(&emu_lock);
    if (smem > emu_smem_cap) {
        free(emu_smem);
        emu_smem = static_cast<unsigned char *>(malloc(smem));
        emu_smem_cap = smem;
        if (!emu_smem) abort();
    }
    emu_smem_len = smem;
    emu_body = body;
    emu_body_arg = arg;
    emu_grid_dim = grid;
    emu_block_dim = block;
    for (int i = 0; i < nthr; i++)
        if (!emu_fibers[i].stack && !(emu_fibers[i].stack = malloc(EMU_STACK))) abort();
    unsigned long long nblock = 0;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++, nblock++) {
                emu_block_idx = dim3(bx, by, bz);
                if (smem) memset(emu_smem, 0xff, smem);
                for (int i = 0; i < nthr; i++) {
                    emu_fiber *f = &emu_fibers[i];
                    emu_ctx_init(&f->ctx, f->stack, EMU_STACK);
                    f->tid = dim3((unsigned)i, 0, 0);
                    f->state = EMU_RUN;
                }
                memset(emu_slot_gen, 0, sizeof emu_slot_gen);
                int reverse = (int)(nblock & 1);
                for (;;) {
                    int ran = 0;
                    for (int j = 0; j < nthr; j++) {
                        int i = reverse ? nthr - 1 - j : j;
                        emu_fiber *f = &emu_fibers[i];
                        if (f->state != EMU_RUN) continue;
                        emu_cur_fiber = f;
                        emu_cur_index = i;
                        ran = 1;
#if EMU_ASAN
                        __sanitizer_start_switch_fiber(&emu_main_fake, f->stack, EMU_STACK);
#endif
                        emu_ctx_switch(&emu_main, &f->ctx);
#if EMU_ASAN
                        __sanitizer_finish_switch_fiber(emu_main_fake, NULL, NULL);
#endif
                    }
                    if (ran) continue;
                    /* nothing runnable: release a warp barrier, else the block barrier */
                    int released = 0, done = 1, at_block = 0;
                    for (int w = 0; w * 32 < nthr; w++) {
                        int waiting = 0, other = 0, gone = 0;
                        for (int l = w * 32; l < w * 32 + 32; l++) {
                            int s = l < nthr ? emu_fibers[l].state : EMU_DONE;
                            if (s == EMU_WAIT_WARP) waiting++;
                            else if (s == EMU_DONE) gone++;
                            else other++;
                        }
                        if (waiting && gone) {
                            fprintf(stderr, "cuda-emu: warp %d shuffles with %d of its lanes exited or absent "
                                            "(a full-mask shuffle needs all 32; block %u,%u,%u)\n",
                                    w, gone, bx, by, bz);
                            abort();
                        }
                        if (waiting && !other) {
                            for (int l = w * 32; l < w * 32 + 32 && l < nthr; l++)
                                if (emu_fibers[l].state == EMU_WAIT_WARP) emu_fibers[l].state = EMU_RUN;
                            emu_slot_gen[w]++;
                            released = 1;
                        }
                    }
                    if (released) continue;
                    for (int i = 0; i < nthr; i++) {
                        int s = emu_fibers[i].state;
                        if (s != EMU_DONE) done = 0;
                        if (s == EMU_WAIT_BLOCK) at_block++;
                        if (s == EMU_WAIT_WARP) {
                            fprintf(stderr, "cuda-emu: deadlock: thread %d waits at a warp shuffle that some "
                                            "lane of its warp never reaches (block %u,%u,%u)\n",
                                    i, bx, by, bz);
                            abort();
                        }
                    }
                    if (done) break;
                    if (at_block) {
                        for (int i = 0; i < nthr; i++)
                            if (emu_fibers[i].state == EMU_WAIT_BLOCK) emu_fibers[i].state = EMU_RUN;
                        continue;
                    }
                    fprintf(stderr, "cuda-emu: scheduler stuck\n");
                    abort();
                }
            }
    pthread_mutex_unlock(&emu_lock);
}

/* A launch: K(args...) on every thread. */
template <typename F> static void emu_thunk(void *p) { (*static_cast<F *>(p))(); }

template <typename... P, typename... A>
static void emu_launch(void (*k)(P...), dim3 g, dim3 b, size_t smem, A... a) {
    auto f = [=]() { k(a...); };
    emu_run(g, b, smem, emu_thunk<decltype(f)>, &f);
}

} // namespace ILPD_NS

#endif
