/* gpa-sim fiber switch for x86-64 System V, as top-level assembly (no ASM
 * language needed in CMake). It saves the callee-saved registers on the
 * current stack, stores the stack pointer, loads the other one and pops its
 * registers: about 10 ns per switch, against ~250 ns for swapcontext (a
 * sigprocmask syscall per switch). The FP control words (MXCSR, x87 CW) are
 * not switched: all fibers share the worker's floating-point environment.
 *
 *   void gpa_sim__ctx_swap(void **save_sp, void *load_sp);
 *   gpa_sim__ctx_boot: first activation; entry in r12, argument in r13. */
#include "fiber.h"
#ifndef GPA_SIM_USE_UCONTEXT
__asm__(
    ".text\n"
    ".globl gpa_sim__ctx_swap\n"
    ".hidden gpa_sim__ctx_swap\n"
    ".type gpa_sim__ctx_swap, @function\n"
    "gpa_sim__ctx_swap:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size gpa_sim__ctx_swap, .-gpa_sim__ctx_swap\n"
    ".globl gpa_sim__ctx_boot\n"
    ".hidden gpa_sim__ctx_boot\n"
    ".type gpa_sim__ctx_boot, @function\n"
    "gpa_sim__ctx_boot:\n"
    "  movq %r13, %rdi\n"
    "  callq *%r12\n"
    "  ud2\n"
    ".size gpa_sim__ctx_boot, .-gpa_sim__ctx_boot\n");
#endif
