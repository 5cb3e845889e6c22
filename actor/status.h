/* The runtime's error and log services: the one runtime header that op
 * families and backends include (besides their own narrow interfaces), so
 * that they can report without seeing the actor's internals. */
#ifndef GPA_ACTOR_STATUS_H
#define GPA_ACTOR_STATUS_H
#include "gpuactor/status.h"

/* Sets the calling thread's last error message; returns st. */
gpa_status gpa__fail(gpa_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void gpa__clear_error(void);
/* stderr, when level <= threshold (GPA_LOG_ERROR .. GPA_LOG_DEBUG). */
void gpa__log(int level, int threshold, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int gpa__log_threshold(void);

#endif
