/* Status strings, the per-thread last error, version and time. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "actor/internal.h"

const char *gpa_strerror(int status) {
  switch (status) {
#define GPA__STR_CASE(name, num, text) \
  case num: return text;
    GPA_STATUS_MAP(GPA__STR_CASE)
#undef GPA__STR_CASE
  }
  return "unknown status";
}

const char *gpa_status_name(int status) {
  switch (status) {
#define GPA__NAME_CASE(name, num, text) \
  case num: return "GPA_" #name;
    GPA_STATUS_MAP(GPA__NAME_CASE)
#undef GPA__NAME_CASE
  }
  return "GPA_UNKNOWN";
}

static _Thread_local char gpa__last_error[256];

const char *gpa_last_error_message(void) { return gpa__last_error; }

void gpa__clear_error(void) { gpa__last_error[0] = 0; }

gpa_status gpa__fail(gpa_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(gpa__last_error, sizeof gpa__last_error, fmt, ap);
  va_end(ap);
  return st;
}

unsigned gpa_version(void) { return GPA_VERSION_HEX; }
const char *gpa_version_string(void) { return GPA_VERSION_STRING; }

int64_t gpa__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
