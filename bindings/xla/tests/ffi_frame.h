/* What XLA gives an FFI handler, made by a test without XLA: the C API
 * table (errors, the stream and device ordinal of an execution context,
 * handler registration) and call frames of buffers and attributes, built
 * against XLA's own header (xla/ffi/api/c_api.h from jaxlib). Enough for
 * the handlers of libgpuactor_xla.so; not a general XLA. */
#ifndef GPA_XLA_TEST_FFI_FRAME_H
#define GPA_XLA_TEST_FFI_FRAME_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/ffi_version.h"

/* The tests' assertion: on failure, where and what, and exit 1. */
#define CHECK(c)                                                            \
  do {                                                                      \
    if (!(c)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

struct XLA_FFI_Error {
  XLA_FFI_Error_Code code;
  char msg[1024];
};
/* XLA's is opaque to handlers; the test's holds what its API answers
 * (XLA_FFI_ExecutionContext names it in either version). */
struct GPA_FFI_CONTEXT_TAG {
  void *stream; /* a CUstream of the simulated driver; NULL: Stream_Get fails */
  int32_t ordinal;
};

static inline XLA_FFI_Error *ff_error_create(XLA_FFI_Error_Create_Args *a) {
  XLA_FFI_Error *e = calloc(1, sizeof *e);
  e->code = a->errc;
  snprintf(e->msg, sizeof e->msg, "%s", a->message);
  return e;
}
static inline void ff_error_message(gpa_ffi_error_text_args *a) { a->message = a->error->msg; }
static inline void ff_error_destroy(XLA_FFI_Error_Destroy_Args *a) { free(a->error); }

static inline XLA_FFI_Error *ff_stream_get(XLA_FFI_Stream_Get_Args *a) {
  if (!a->ctx || !a->ctx->stream) {
    XLA_FFI_Error_Create_Args e = {XLA_FFI_Error_Create_Args_STRUCT_SIZE, NULL, "no stream in this context",
                                   XLA_FFI_Error_Code_FAILED_PRECONDITION};
    return ff_error_create(&e);
  }
  a->stream = a->ctx->stream;
  return NULL;
}
static inline XLA_FFI_Error *ff_ordinal_get(XLA_FFI_DeviceOrdinal_Get_Args *a) {
  a->device_ordinal = a->ctx->ordinal;
  return NULL;
}

/* What registration was asked for. */
#define FF_MAX_REG 32
static struct {
  char name[64], platform[16];
  XLA_FFI_Handler *execute;
} ff_reg[FF_MAX_REG];
static int ff_n_reg;
/* Set: registration fails with this message, as XLA's does for a handler
 * whose metadata it refuses. */
static const char *ff_register_refuse;
static inline XLA_FFI_Error *ff_register(XLA_FFI_Handler_Register_Args *a) {
  if (ff_register_refuse) {
    XLA_FFI_Error_Create_Args e = {XLA_FFI_Error_Create_Args_STRUCT_SIZE, NULL, ff_register_refuse,
                                   XLA_FFI_Error_Code_INVALID_ARGUMENT};
    return ff_error_create(&e);
  }
  if (ff_n_reg == FF_MAX_REG) return NULL;
  snprintf(ff_reg[ff_n_reg].name, sizeof ff_reg[0].name, "%.*s", (int)a->name.len, a->name.ptr);
  snprintf(ff_reg[ff_n_reg].platform, sizeof ff_reg[0].platform, "%.*s", (int)a->platform.len, a->platform.ptr);
  ff_reg[ff_n_reg++].execute = a->bundle.execute;
  return NULL;
}

/* Futures, as XLA's CPU runtime makes them: the test waits on them. */
#include <pthread.h>
#include <time.h>
struct XLA_FFI_Future {
  int done;
  XLA_FFI_Error *error; /* set by SetError */
};
static pthread_mutex_t ff_fut_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ff_fut_cv = PTHREAD_COND_INITIALIZER;
static inline XLA_FFI_Error *ff_future_create(XLA_FFI_Future_Create_Args *a) {
  a->future = calloc(1, sizeof *a->future);
  return NULL;
}
static inline XLA_FFI_Error *ff_future_set(XLA_FFI_Future *f, XLA_FFI_Error *e) {
  pthread_mutex_lock(&ff_fut_mu);
  f->done++, f->error = e;
  pthread_cond_broadcast(&ff_fut_cv);
  pthread_mutex_unlock(&ff_fut_mu);
  return NULL;
}
static inline XLA_FFI_Error *ff_future_available(XLA_FFI_Future_SetAvailable_Args *a) {
  return ff_future_set(a->future, NULL);
}
static inline XLA_FFI_Error *ff_future_error(XLA_FFI_Future_SetError_Args *a) {
  return ff_future_set(a->future, a->error);
}
/* Waits up to ms for the future; its completions so far (1: completed
 * once). */
static inline int ff_future_wait(XLA_FFI_Future *f, int ms) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  t.tv_sec += ms / 1000, t.tv_nsec += (ms % 1000) * 1000000L;
  if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&ff_fut_mu);
  while (!f->done && pthread_cond_timedwait(&ff_fut_cv, &ff_fut_mu, &t) == 0) {
  }
  int n = f->done;
  pthread_mutex_unlock(&ff_fut_mu);
  return n;
}

static inline XLA_FFI_Api ff_api(void) {
  XLA_FFI_Api api;
  memset(&api, 0, sizeof api);
  api.struct_size = XLA_FFI_Api_STRUCT_SIZE;
  api.api_version = (XLA_FFI_Api_Version){XLA_FFI_Api_Version_STRUCT_SIZE, NULL, XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR};
  api.XLA_FFI_Error_Create = ff_error_create;
  GPA_FFI_ERROR_TEXT(&api) = ff_error_message;
  api.XLA_FFI_Error_Destroy = ff_error_destroy;
  api.XLA_FFI_Handler_Register = ff_register;
  api.XLA_FFI_Stream_Get = ff_stream_get;
  api.XLA_FFI_DeviceOrdinal_Get = ff_ordinal_get;
  api.XLA_FFI_Future_Create = ff_future_create;
  api.XLA_FFI_Future_SetAvailable = ff_future_available;
  api.XLA_FFI_Future_SetError = ff_future_error;
  return api;
}

/* A call frame under construction: buffers, then attributes in name order
 * (XLA sorts them). */
#define FF_MAX 12
typedef struct ff_frame {
  XLA_FFI_CallFrame f;
  XLA_FFI_Buffer buf[FF_MAX];
  int64_t dims[FF_MAX][8];
  int n_buf;
  void *args[FF_MAX], *rets[FF_MAX];
  XLA_FFI_ArgType arg_types[FF_MAX];
  XLA_FFI_RetType ret_types[FF_MAX];
  XLA_FFI_ByteSpan names[FF_MAX], *name_ptrs[FF_MAX], strings[FF_MAX];
  XLA_FFI_AttrType attr_types[FF_MAX];
  void *attrs[FF_MAX];
  XLA_FFI_Scalar scalars[FF_MAX];
  int32_t i32[FF_MAX];
  double f64[FF_MAX];
} ff_frame;

static inline void ff_init(ff_frame *b, const XLA_FFI_Api *api, XLA_FFI_ExecutionContext *ctx) {
  memset(b, 0, sizeof *b);
  b->f.struct_size = XLA_FFI_CallFrame_STRUCT_SIZE;
  b->f.api = api;
  b->f.ctx = ctx;
  b->f.stage = XLA_FFI_ExecutionStage_EXECUTE;
  b->f.args = (XLA_FFI_Args){XLA_FFI_Args_STRUCT_SIZE, NULL, 0, b->arg_types, b->args};
  b->f.rets = (XLA_FFI_Rets){XLA_FFI_Rets_STRUCT_SIZE, NULL, 0, b->ret_types, b->rets};
  b->f.attrs = (XLA_FFI_Attrs){XLA_FFI_Attrs_STRUCT_SIZE, NULL, 0, b->attr_types, b->name_ptrs, b->attrs};
}

/* A buffer of `rank` dims at device address p: an operand (ret 0) or a
 * result (ret 1). */
static inline void ff_buf(ff_frame *b, int ret, XLA_FFI_DataType dt, unsigned long long p, int rank,
                          const int64_t *dims) {
  XLA_FFI_Buffer *x = &b->buf[b->n_buf];
  if (rank > 0) memcpy(b->dims[b->n_buf], dims, (size_t)rank * sizeof *dims);
  *x = (XLA_FFI_Buffer){XLA_FFI_Buffer_STRUCT_SIZE, NULL, dt, (void *)(uintptr_t)p, rank, b->dims[b->n_buf]};
  b->n_buf++;
  if (ret) {
    b->ret_types[b->f.rets.size] = XLA_FFI_RetType_BUFFER;
    b->rets[b->f.rets.size++] = x;
  } else {
    b->arg_types[b->f.args.size] = XLA_FFI_ArgType_BUFFER;
    b->args[b->f.args.size++] = x;
  }
}

static inline void ff_name(ff_frame *b, int i, const char *name, XLA_FFI_AttrType t) {
  b->names[i] = (XLA_FFI_ByteSpan){name, strlen(name)};
  b->name_ptrs[i] = &b->names[i];
  b->attr_types[i] = t;
  b->f.attrs.size++;
}
static inline void ff_attr_i32(ff_frame *b, const char *name, int32_t v) {
  int i = (int)b->f.attrs.size;
  b->i32[i] = v;
  b->scalars[i] = (XLA_FFI_Scalar){XLA_FFI_DataType_S32, &b->i32[i]};
  b->attrs[i] = &b->scalars[i];
  ff_name(b, i, name, XLA_FFI_AttrType_SCALAR);
}
static inline void ff_attr_f64(ff_frame *b, const char *name, double v) {
  int i = (int)b->f.attrs.size;
  b->f64[i] = v;
  b->scalars[i] = (XLA_FFI_Scalar){XLA_FFI_DataType_F64, &b->f64[i]};
  b->attrs[i] = &b->scalars[i];
  ff_name(b, i, name, XLA_FFI_AttrType_SCALAR);
}
static inline void ff_attr_str(ff_frame *b, const char *name, const char *v) {
  int i = (int)b->f.attrs.size;
  b->strings[i] = (XLA_FFI_ByteSpan){v, strlen(v)};
  b->attrs[i] = &b->strings[i];
  ff_name(b, i, name, XLA_FFI_AttrType_STRING);
}
#endif
