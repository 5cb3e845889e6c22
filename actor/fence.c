/* Asymmetric fences (see fence.h). */
#include "actor/fence.h"
#include "actor/internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(__linux__) && defined(SYS_membarrier)
#include <linux/membarrier.h>
#endif

bool gpa__fence_asym;
static pthread_once_t fence_once = PTHREAD_ONCE_INIT;

static void fence_setup(void) {
#if defined(__linux__) && defined(SYS_membarrier) && !defined(GPA_TSAN)
  /* Tests run the fallback too (it is what a kernel without membarrier gets). */
  if (gpa__options_process()->no_membarrier) return;
  long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  if (cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
      syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0)
    gpa__fence_asym = true;
#endif
}

void gpa__fence_init(void) { pthread_once(&fence_once, fence_setup); }

void gpa__fence_heavy(void) {
#if defined(__linux__) && defined(SYS_membarrier) && !defined(GPA_TSAN)
  /* Registered once, never unregistered: the command cannot fail later. */
  if (gpa__fence_asym && syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0) return;
#endif
  atomic_thread_fence(memory_order_seq_cst);
}
