/* Leveled internal asserts, compiled only into a debug build
 * (-DGPA_DEBUG=1..3, cmake -DGPA_DEBUG=N):
 *   1: cheap checks of messages and handles (the handle misuse checks below);
 *   2: invariants on the per-message path (ticket order, reference counts);
 *   3: expensive walks.
 * A failed assert is a bug in the library: it logs where and aborts. Misuse
 * of the public API is not an assert: a debug build detects what it can
 * (a handle released twice, used after its release) and reports it as an
 * error (the last-error message and an error log line) instead of letting
 * it corrupt the message pool; a release build cannot tell (docs/api.md). */
#ifndef GPA_ACTOR_DEBUG_H
#define GPA_ACTOR_DEBUG_H

#ifndef GPA_DEBUG
#define GPA_DEBUG 0
#endif

void gpa__assert_fail(const char *what, const char *file, int line) __attribute__((noreturn, cold));
#if GPA_DEBUG
#define GPA__ASSERT(level, cond)                                                                         \
  do {                                                                                                   \
    if (GPA_DEBUG >= (level) && __builtin_expect(!(cond), 0)) gpa__assert_fail(#cond, __FILE__, __LINE__); \
  } while (0)
#else
#define GPA__ASSERT(level, cond) ((void)0) /* cond is not compiled: it may name debug-only fields */
#endif

/* A message's life in a debug build (gpa_handle.dbg_magic). */
#define GPA__MSG_LIVE 0x6c697665u /* out of its pool */
#define GPA__MSG_FREE 0x66726565u /* back in its pool */

#endif
