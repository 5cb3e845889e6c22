/* Communicator ids: making them, and carrying them as text or in a file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "actor/status.h"
#include "comm/comm_id.h"

bool gpa__comm_id_valid(const gpa_comm_id *id) {
  return memcmp(id->bytes, GPA__COMM_ID_MAGIC, 4) == 0 && id->bytes[4] == GPA__COMM_ID_VERSION;
}

int gpa__comm_id_color(const gpa_comm_id *id) {
  const unsigned char *t = id->bytes + GPA__COMM_TOKEN_OFF;
  return (int)(((unsigned)t[0] | (unsigned)t[1] << 8 | (unsigned)t[2] << 16 | (unsigned)t[3] << 24) & 0x7fffffffu);
}

gpa_status gpa_comm_id_make(gpa_comm_id *out) {
  if (!out) return gpa__fail(GPA_EINVAL, "gpa_comm_id_make: NULL argument");
  memset(out, 0, sizeof *out);
  memcpy(out->bytes, GPA__COMM_ID_MAGIC, 4);
  out->bytes[4] = GPA__COMM_ID_VERSION;
  unsigned char *t = out->bytes + GPA__COMM_TOKEN_OFF;
  size_t got = 0;
  while (got < GPA__COMM_TOKEN_BYTES) {
    ssize_t n = getrandom(t + got, GPA__COMM_TOKEN_BYTES - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      memset(out, 0, sizeof *out);
      return gpa__fail(GPA_EUNSUPPORTED, "gpa_comm_id_make: getrandom failed (%s)", strerror(errno));
    }
    got += (size_t)n;
  }
  return GPA_OK;
}

gpa_status gpa_comm_id_format(const gpa_comm_id *id, char *buf, uint64_t cap) {
  if (!id || !buf) return gpa__fail(GPA_EINVAL, "gpa_comm_id_format: NULL argument");
  if (cap < GPA_COMM_ID_TEXT)
    return gpa__fail(GPA_EINVAL, "gpa_comm_id_format: %llu bytes, the text needs %d (GPA_COMM_ID_TEXT)",
                     (unsigned long long)cap, GPA_COMM_ID_TEXT);
  static const char hex[] = "0123456789abcdef";
  for (int i = 0; i < GPA_COMM_ID_BYTES; i++) {
    buf[2 * i] = hex[id->bytes[i] >> 4];
    buf[2 * i + 1] = hex[id->bytes[i] & 15];
  }
  buf[2 * GPA_COMM_ID_BYTES] = 0;
  return GPA_OK;
}

static int nibble(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

gpa_status gpa_comm_id_parse(const char *text, gpa_comm_id *out) {
  if (!text || !out) return gpa__fail(GPA_EINVAL, "gpa_comm_id_parse: NULL argument");
  gpa_comm_id id;
  size_t len = strnlen(text, GPA_COMM_ID_TEXT + 1);
  while (len && (text[len - 1] == '\n' || text[len - 1] == ' ')) len--; /* a file's or echo's newline */
  if (len != 2 * GPA_COMM_ID_BYTES)
    return gpa__fail(GPA_EINVAL, "gpa_comm_id_parse: %zu characters, an id has %d hex digits", len,
                     2 * GPA_COMM_ID_BYTES);
  for (int i = 0; i < GPA_COMM_ID_BYTES; i++) {
    int hi = nibble(text[2 * i]), lo = nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return gpa__fail(GPA_EINVAL, "gpa_comm_id_parse: not a hex digit at %d", 2 * i);
    id.bytes[i] = (unsigned char)(hi << 4 | lo);
  }
  if (!gpa__comm_id_valid(&id)) return gpa__fail(GPA_EINVAL, "gpa_comm_id_parse: not the text of a gpa_comm_id");
  *out = id;
  return GPA_OK;
}

gpa_status gpa_comm_id_write_file(const char *path, const gpa_comm_id *id) {
  if (!path || !id) return gpa__fail(GPA_EINVAL, "gpa_comm_id_write_file: NULL argument");
  char text[GPA_COMM_ID_TEXT], tmp[4096];
  gpa_comm_id_format(id, text, sizeof text);
  /* Readers poll for the name: it must appear complete, so write aside and rename. */
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
    return gpa__fail(GPA_EINVAL, "gpa_comm_id_write_file: path too long");
  FILE *f = fopen(tmp, "w");
  if (!f) return gpa__fail(GPA_ENOTFOUND, "gpa_comm_id_write_file: %s: %s", tmp, strerror(errno));
  bool ok = fprintf(f, "%s\n", text) > 0;
  ok = fclose(f) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return gpa__fail(GPA_ENOTFOUND, "gpa_comm_id_write_file: %s: %s", path, strerror(e));
  }
  return GPA_OK;
}

gpa_status gpa_comm_id_read_file(const char *path, int64_t timeout_ns, gpa_comm_id *out) {
  if (!path || !out) return gpa__fail(GPA_EINVAL, "gpa_comm_id_read_file: NULL argument");
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    FILE *f = fopen(path, "r");
    if (f) {
      char text[GPA_COMM_ID_TEXT + 8] = {0};
      size_t n = fread(text, 1, sizeof text - 1, f);
      fclose(f);
      text[n] = 0;
      gpa_status st = gpa_comm_id_parse(text, out);
      if (st != GPA_OK) return gpa__fail(st, "gpa_comm_id_read_file: %s: %s", path, gpa_last_error_message());
      return GPA_OK;
    }
    if (errno != ENOENT) return gpa__fail(GPA_ENOTFOUND, "gpa_comm_id_read_file: %s: %s", path, strerror(errno));
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t waited = (now.tv_sec - t0.tv_sec) * 1000000000ll + (now.tv_nsec - t0.tv_nsec);
    if (timeout_ns >= 0 && waited >= timeout_ns)
      return gpa__fail(GPA_ETIMEDOUT, "gpa_comm_id_read_file: %s did not appear within %lld ms", path,
                       (long long)(timeout_ns / 1000000));
    nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL); /* a launcher's pace, not a hot loop */
  }
}
