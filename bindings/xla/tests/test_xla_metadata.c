/* The handshake with XLA, against whichever jaxlib header the build found
 * (FFI 0.3 of jaxlib 0.10, 0.4 of jaxlib 0.11; ffi_version.h): the
 * metadata query XLA sends each handler at registration, as XLA builds it
 * (a call frame whose extension_start is the metadata extension, no
 * context, no arguments), answered by every host and CUDA handler with the
 * header's version, no traits and no state; found further down the
 * extension chain too; not taken for an extension of another type; a query
 * too small for the answer an error. Then gpa_xla_register through the C
 * API: the bundles XLA is given, and a refusal's message read back through
 * the version's error API. No actor is made: runs in every pass. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ffi_frame.h"
#include "gpuactor_xla.h"

static XLA_FFI_Api api;

typedef struct query {
  XLA_FFI_Metadata m;
  XLA_FFI_Metadata_Extension ext;
  XLA_FFI_CallFrame f;
} query;

/* The query as XLA makes it (its metadata zeroed but for the size). */
static void query_init(query *q) {
  memset(q, 0, sizeof *q);
  q->m.struct_size = XLA_FFI_Metadata_STRUCT_SIZE;
  q->m.api_version.struct_size = XLA_FFI_Api_Version_STRUCT_SIZE;
  q->m.traits = ~0u; /* the handler must clear it */
  /* XLA's STRUCT_SIZE ends at traits: state_type_id, zeroed by XLA, is
   * past what the query declares (big_query covers it). */
  q->ext.extension_base.struct_size = XLA_FFI_Metadata_Extension_STRUCT_SIZE;
  q->ext.extension_base.type = XLA_FFI_Extension_Metadata;
  q->ext.metadata = &q->m;
  q->f.struct_size = XLA_FFI_CallFrame_STRUCT_SIZE;
  q->f.extension_start = &q->ext.extension_base;
  q->f.api = &api;
  q->f.stage = XLA_FFI_ExecutionStage_EXECUTE;
  q->f.args.struct_size = XLA_FFI_Args_STRUCT_SIZE;
  q->f.rets.struct_size = XLA_FFI_Rets_STRUCT_SIZE;
  q->f.attrs.struct_size = XLA_FFI_Attrs_STRUCT_SIZE;
}

static void answers(const gpa_xla_target *t, int32_t major, int32_t minor, int big_query) {
  query q;
  query_init(&q);
  if (big_query) q.m.struct_size = sizeof q.m, q.m.state_type_id.type_id = 77; /* the handler must clear it */
  XLA_FFI_Error *e = t->handler(&q.f);
  if (e) fprintf(stderr, "%s: %s\n", t->name, e->msg);
  CHECK(e == NULL);
  CHECK(q.m.api_version.major_version == major && q.m.api_version.minor_version == minor);
  CHECK(q.m.api_version.struct_size == XLA_FFI_Api_Version_STRUCT_SIZE);
  CHECK(q.m.traits == 0 && q.m.state_type_id.type_id == 0);
}

static void all_handlers(void) {
  int32_t major = -1, minor = -1;
  gpa_xla_ffi_version(&major, &minor);
  CHECK(major == XLA_FFI_API_MAJOR && minor == XLA_FFI_API_MINOR);
  int n = 0;
  for (const gpa_xla_target *t = gpa_xla_targets(); t->name; t++, n++) answers(t, major, minor, n % 2);
  CHECK(n == 12);
  n = 0;
  for (const gpa_xla_target *t = gpa_xla_cuda_targets(); t->name; t++, n++) answers(t, major, minor, n % 2);
  CHECK(n == 12);
}

static void chain(void) {
  /* Behind an extension of another type: still the query. */
  query q;
  query_init(&q);
  gpa_ffi_extension other = {sizeof other, (int)XLA_FFI_Extension_Metadata + 40, &q.ext.extension_base};
  q.f.extension_start = &other;
  CHECK(gpa_xla_gelu_fwd(&q.f) == NULL);
  CHECK(q.m.api_version.minor_version == XLA_FFI_API_MINOR && q.m.traits == 0);

  /* That extension alone: an execution call (here one without its operand,
   * an error naming it), and the metadata is left alone. */
  query_init(&q);
  other.next = NULL;
  q.f.extension_start = &other;
  XLA_FFI_Error *e = gpa_xla_gelu_fwd(&q.f);
  CHECK(e && e->code == XLA_FFI_Error_Code_INVALID_ARGUMENT && strstr(e->msg, "gpuactor_gelu_fwd"));
  free(e);
  CHECK(q.m.api_version.major_version == 0 && q.m.api_version.minor_version == 0 && q.m.traits == ~0u);

  /* A query whose metadata is too small for the answer. */
  query_init(&q);
  q.m.struct_size = offsetof(XLA_FFI_Metadata, traits);
  e = gpa_xla_nothing(&q.f);
  CHECK(e && e->code == XLA_FFI_Error_Code_INVALID_ARGUMENT && strstr(e->msg, "metadata query is too old"));
  free(e);
  CHECK(q.m.api_version.minor_version == 0);
}

static void registration(void) {
  char msg[256] = "";
  CHECK(gpa_xla_register(&api, NULL, "exla_gpa_", msg, sizeof msg) == 0);
  const gpa_xla_target *t = gpa_xla_targets();
  CHECK(ff_n_reg == 12);
  for (int i = 0; i < ff_n_reg; i++, t++) {
    CHECK(!strncmp(ff_reg[i].name, "exla_gpa_", 9) && !strcmp(ff_reg[i].name + 9, t->name + 9));
    CHECK(!strcmp(ff_reg[i].platform, "Host") && ff_reg[i].execute == t->handler);
  }
  /* A refusal: the first one's message, read through the error API. */
  ff_register_refuse = "the handler's API version (0.9) is incompatible";
  CHECK(gpa_xla_register(&api, "cuda", NULL, msg, sizeof msg) == -1);
  CHECK(!strcmp(msg, "gpuactor_attention_fwd: the handler's API version (0.9) is incompatible"));
  ff_register_refuse = NULL;
}

int main(void) {
  api = ff_api();
  all_handlers();
  chain();
  registration();
  printf("xla metadata (FFI %d.%d): ok\n", XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR);
  return 0;
}
