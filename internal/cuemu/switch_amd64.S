// Fiber context switch for the emulator's block scheduler (System V x86-64). A switch saves
// the callee-saved registers on the current stack, stores the stack pointer, and resumes the
// other stack: a few nanoseconds, no system call (ucontext's swapcontext makes one per switch
// to save the signal mask, which the emulator does not need).

// void cuemu_switch(void **save_sp, void *to_sp)
	.text
	.globl	cuemu_switch
	.type	cuemu_switch, @function
cuemu_switch:
	pushq	%rbp
	pushq	%rbx
	pushq	%r12
	pushq	%r13
	pushq	%r14
	pushq	%r15
	movq	%rsp, (%rdi)
	movq	%rsi, %rsp
	popq	%r15
	popq	%r14
	popq	%r13
	popq	%r12
	popq	%rbx
	popq	%rbp
	ret
	.size	cuemu_switch, .-cuemu_switch

// A new fiber's first switch returns here with its argument in r12 and its entry in r13; the
// stack is 16-byte aligned at the call. The entry never returns.
	.globl	cuemu_fiber_start
	.type	cuemu_fiber_start, @function
cuemu_fiber_start:
	movq	%r12, %rdi
	callq	*%r13
	ud2
	.size	cuemu_fiber_start, .-cuemu_fiber_start

	.section .note.GNU-stack,"",@progbits
