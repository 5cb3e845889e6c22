/* Logging to stderr, filtered by GPA_LOG / the actor's log_level. */
#include <stdarg.h>
#include <stdio.h>

#include "actor/internal.h"

static const char *const gpa__level_names[] = {"", "error", "warning", "info", "debug"};

void gpa__log(int level, int threshold, const char *fmt, ...) {
  if (level > threshold || level < GPA_LOG_ERROR || level > GPA_LOG_DEBUG) return;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "gpuactor: %s: %s\n", gpa__level_names[level], line);
}
