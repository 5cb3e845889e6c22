/* Time for the actor and the backends: gpa__now_ns is CLOCK_MONOTONIC
 * (deadlines); gpa__clock_ns a cheap duration clock on the same scale (TSC
 * where invariant), set up by gpa__clock_init before the first actor runs.
 * Any thread (actor/status.c). */
#ifndef GPA_ACTOR_CLOCK_H
#define GPA_ACTOR_CLOCK_H
#include <stdint.h>

int64_t gpa__now_ns(void);
int64_t gpa__clock_ns(void);
void gpa__clock_init(void);

#endif
