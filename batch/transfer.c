/* Uploads and readbacks: the two messages that carry host data. */
#include <stdlib.h>
#include <string.h>

#include "actor/internal.h"

static gpa_status transfer_msg(gpa_queue *q, const gpa_tensor *t, int kind, const char *what, uint64_t *bytes,
                               gpa__msg **out) {
  gpa_status st = gpa__check_queue(q);
  if (st != GPA_OK) return st;
  if (!t) return gpa__fail(GPA_EINVAL, "%s: tensor is NULL", what);
  st = gpa__check_tensor(q->actor, t, what);
  if (st != GPA_OK) return st;
  gpa__tensor_bytes(t, bytes, what);
  gpa__msg *m = gpa__msg_new(q->actor, kind);
  if (!m) return GPA_ENOMEM;
  gpa__msg_set_tensors(m, t, 1, NULL, 0);
  m->q = q;
  *out = m;
  return GPA_OK;
}

static gpa_status send_or_drop(gpa_queue *q, gpa__msg *m, gpa_handle **out) {
  gpa_status st = out ? gpa__send(q->actor, m) : gpa__send_owned(q->actor, m);
  if (st != GPA_OK) gpa__msg_unref(m);
  else if (out) gpa__handle_out(*out = m);
  return st;
}

gpa_status gpa_upload(gpa_queue *q, const gpa_tensor *dst, const void *src, uint64_t size, uint64_t version,
                      gpa_handle **out) {
  if (out) *out = NULL;
  if (!src && size) return gpa__fail(GPA_EINVAL, "gpa_upload: src is NULL");
  uint64_t bytes;
  gpa__msg *m;
  gpa_status st = transfer_msg(q, dst, GPA__MSG_UPLOAD, "gpa_upload: dst", &bytes, &m);
  if (st != GPA_OK) return st;
  if (bytes != size) {
    gpa__msg_unref(m);
    return gpa__fail(GPA_ESHAPE, "gpa_upload: size %llu does not match dst's %llu bytes", (unsigned long long)size,
                     (unsigned long long)bytes);
  }
  /* Copied now: the caller may free src as soon as we return. */
  if (size) {
    m->payload = malloc(size);
    if (!m->payload) {
      gpa__msg_unref(m);
      return gpa__fail(GPA_ENOMEM, "gpa_upload: out of memory copying %llu bytes", (unsigned long long)size);
    }
    memcpy(m->payload, src, size);
  }
  m->payload_size = size;
  m->version = version;
  return send_or_drop(q, m, out);
}

gpa_status gpa_readback(gpa_queue *q, const gpa_tensor *src, gpa_handle **out) {
  if (!out) return gpa__fail(GPA_EINVAL, "gpa_readback: out is NULL (a readback needs a handle to read from)");
  *out = NULL;
  uint64_t bytes;
  gpa__msg *m;
  gpa_status st = transfer_msg(q, src, GPA__MSG_READBACK, "gpa_readback: src", &bytes, &m);
  if (st != GPA_OK) return st;
  if (bytes) {
    m->payload = malloc(bytes);
    if (!m->payload) {
      gpa__msg_unref(m);
      return gpa__fail(GPA_ENOMEM, "gpa_readback: out of memory for %llu bytes", (unsigned long long)bytes);
    }
  }
  m->payload_size = bytes;
  return send_or_drop(q, m, out);
}
