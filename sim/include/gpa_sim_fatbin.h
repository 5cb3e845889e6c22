/* gpa-sim: identity of a fatbin image. The emulated module built from the
 * same sources records the id of its fatbin at build time (tools/fatbin_id.c);
 * cuModuleLoadData computes it from the image it is given to find the module.
 * The id is FNV-1a 64 over the whole image: header (16 bytes: magic
 * 0xBA55ED50, u16 version, u16 header size, u64 payload size) + payload. */
#ifndef GPA_SIM_FATBIN_H
#define GPA_SIM_FATBIN_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define GPA_SIM_FATBIN_MAGIC 0xBA55ED50u

/* Size of the fatbin image at p, or 0 if p does not start with a fatbin header. */
static inline size_t gpa_sim_fatbin_size(const void *p) {
  uint32_t magic;
  uint16_t hdr;
  uint64_t payload;
  memcpy(&magic, p, 4);
  if (magic != GPA_SIM_FATBIN_MAGIC) return 0;
  memcpy(&hdr, (const char *)p + 6, 2);
  memcpy(&payload, (const char *)p + 8, 8);
  return (size_t)hdr + (size_t)payload;
}

static inline uint64_t gpa_sim_fatbin_id(const void *p, size_t n) {
  const unsigned char *b = (const unsigned char *)p;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}
#endif
