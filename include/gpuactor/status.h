#ifndef GPUACTOR_STATUS_H
#define GPUACTOR_STATUS_H

/* Status codes: 0 ok, negative errors, fixed numbers that never depend on the
 * platform. One table generates the enum, gpa_strerror and gpa_status_name. */
#define GPA_STATUS_MAP(X)                                                        \
  X(OK, 0, "success")                                                            \
  X(EINVAL, -1, "invalid argument")                                              \
  X(ENOMEM, -2, "out of memory")                                                 \
  X(EAGAIN, -3, "mailbox full; try again")                                       \
  X(ETIMEDOUT, -4, "timed out")                                                  \
  X(ECANCELED, -5, "cancelled")                                                  \
  X(ESTALE, -6, "stale buffer id")                                               \
  X(ENOTSYNCED, -7, "readback not synced yet: await the handle or sync its batch") \
  X(EUNSUPPORTED, -8, "not supported")                                           \
  X(ENODEVICE, -9, "no such device")                                             \
  X(EDEVICE, -10, "device error")                                                \
  X(ENOTFOUND, -11, "not found")                                                 \
  X(ESHUTDOWN, -12, "actor is shutting down")                                    \
  X(ESHAPE, -13, "shape mismatch")                                               \
  X(EDTYPE, -14, "wrong dtype")                                                  \
  X(EOVERFLOW, -15, "size overflows")                                            \
  X(EMISMATCH, -16, "label exists with a different size")                        \
  X(ECLOSED, -17, "queue destroyed")                                             \
  X(EPENDING, -18, "not complete yet")                                           \
  X(ERANGE, -19, "value out of range")                                           \
  X(EBUSY, -20, "resource busy")                                                 \
  X(EINTERNAL, -21, "internal error")                                            \
  X(SKIP, 1, "implementation skipped these inputs")

#ifdef __cplusplus
extern "C" {
#endif
/* Everything declared here is exported; the rest of the library is hidden. */
#pragma GCC visibility push(default)

typedef enum gpa_status {
#define GPA__STATUS_ENUM(name, num, text) GPA_##name = num,
  GPA_STATUS_MAP(GPA__STATUS_ENUM)
#undef GPA__STATUS_ENUM
} gpa_status;

/* Human-readable text of a status; "unknown status" for numbers not in the
 * table. Any thread; static strings. */
const char *gpa_strerror(int status);
/* "GPA_EINVAL"; "GPA_UNKNOWN" for numbers not in the table. Any thread. */
const char *gpa_status_name(int status);
/* Detail text of the last error returned to this thread by a gpa_ call
 * ("" if none). Valid until this thread's next failing call. */
const char *gpa_last_error_message(void);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
