/* The op registry (see registry.h for the concurrency design). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actor/internal.h"

static uint32_t name_hash(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
  return h;
}

gpa_status gpa__registry_init(gpa_registry *reg) {
  memset(reg, 0, sizeof *reg);
  pthread_mutex_init(&reg->lock, NULL);
  for (uint32_t f = 0; f < gpa__builtin_family_count; f++)
    for (uint32_t i = 0; i < gpa__builtin_families[f]->count; i++) {
      gpa_status st = gpa_op_register(reg, &gpa__builtin_families[f]->ops[i]);
      if (st != GPA_OK) return st;
    }
  return GPA_OK;
}

void gpa__registry_fini(gpa_registry *reg) {
  for (uint32_t i = 0; i < GPA__REG_SLOTS; i++) {
    gpa__op *op = atomic_load(&reg->slot[i]);
    while (op) {
      gpa__op *next = op->next;
      free(op->attrs);
      free(op->attr_names);
      free(op);
      op = next;
    }
  }
  /* Last: the ops above may have pointed into these libraries. */
  for (uint32_t i = 0; i < reg->n_plugins; i++) dlclose(reg->plugins[i]);
  reg->n_plugins = 0;
  pthread_mutex_destroy(&reg->lock);
}

/* Probe sequence shared by lookups and inserts: names are never removed, so
 * an empty slot ends every probe. */
static uint32_t find_slot(const gpa_registry *reg, const char *name, bool *found) {
  uint32_t i = name_hash(name) & (GPA__REG_SLOTS - 1);
  for (uint32_t n = 0; n < GPA__REG_SLOTS; n++, i = (i + 1) & (GPA__REG_SLOTS - 1)) {
    gpa__op *op = atomic_load_explicit(&((gpa_registry *)reg)->slot[i], memory_order_acquire);
    if (!op) { *found = false; return i; }
    if (!strcmp(op->name_buf, name)) { *found = true; return i; }
  }
  *found = false;
  return UINT32_MAX;
}

const gpa__op *gpa__registry_find_slot(const gpa_registry *reg, const char *name, uint32_t *slot) {
  bool found;
  uint32_t i = find_slot(reg, name, &found);
  *slot = i;
  return found ? atomic_load_explicit(&((gpa_registry *)reg)->slot[i], memory_order_acquire) : NULL;
}

const gpa__op *gpa__registry_find(const gpa_registry *reg, const char *name) {
  uint32_t slot;
  return gpa__registry_find_slot(reg, name, &slot);
}

gpa_registry *gpa_actor_registry(gpa_actor *a) { return a ? &a->registry : NULL; }

/* max_outputs, or 0 where the caller's desc (size) ends before it: fields
 * added to gpa_op_desc after a caller was built read as 0. */
static uint32_t desc_max_outputs(const gpa_op_desc *d) {
  return d->size && d->size < offsetof(gpa_op_desc, max_outputs) + sizeof d->max_outputs ? 0 : d->max_outputs;
}

static gpa_status check_desc(const gpa_op_desc *d) {
  if (!d->name || !d->name[0]) return gpa__fail(GPA_EINVAL, "gpa_op_register: name is empty");
  if (strlen(d->name) >= GPA_OP_NAME_MAX)
    return gpa__fail(GPA_EINVAL, "gpa_op_register: name '%.64s...' is longer than %d bytes (GPA_OP_NAME_MAX)", d->name,
                     GPA_OP_NAME_MAX - 1);
  if (d->cuda_kernel && strlen(d->cuda_kernel) >= GPA_OP_KERNEL_NAME_MAX)
    return gpa__fail(GPA_EINVAL, "gpa_op_register('%s'): cuda_kernel is longer than %d bytes (GPA_OP_KERNEL_NAME_MAX)",
                     d->name, GPA_OP_KERNEL_NAME_MAX - 1);
  if (d->size && d->size < offsetof(gpa_op_desc, cuda_launch_shape) + sizeof(void *))
    return gpa__fail(GPA_EINVAL, "gpa_op_register('%s'): desc.size %u is too small", d->name, d->size);
  if (d->min_inputs > d->max_inputs || d->max_inputs > GPA__MAX_IN || d->n_outputs > GPA__MAX_OUT)
    return gpa__fail(GPA_EINVAL, "gpa_op_register('%s'): arity must satisfy min_inputs <= max_inputs <= %d, n_outputs <= %d",
                     d->name, GPA__MAX_IN, GPA__MAX_OUT);
  if (desc_max_outputs(d) && (desc_max_outputs(d) < d->n_outputs || desc_max_outputs(d) > GPA__MAX_OUT))
    return gpa__fail(GPA_EINVAL, "gpa_op_register('%s'): max_outputs %u must satisfy n_outputs (%u) <= max_outputs <= %d",
                     d->name, desc_max_outputs(d), d->n_outputs, GPA__MAX_OUT);
  if (d->params_size > GPA_OP_PARAMS_MAX)
    return gpa__fail(GPA_EINVAL, "gpa_op_register('%s'): params_size %u exceeds %d", d->name, d->params_size,
                     GPA_OP_PARAMS_MAX);
  bool kernel = d->cuda_image || d->cuda_kernel || d->cuda_launch_shape;
  if (kernel && !(d->cuda_image && d->cuda_kernel && d->cuda_launch_shape))
    return gpa__fail(GPA_EINVAL, "gpa_op_register('%s'): cuda_image, cuda_kernel and cuda_launch_shape go together",
                     d->name);
  if (!d->host && !d->cuda && !kernel)
    return gpa__fail(GPA_EINVAL, "gpa_op_register('%s'): no implementation (host, cuda and cuda_image are NULL)",
                     d->name);
  if (d->n_attrs && !d->attrs)
    return gpa__fail(GPA_EINVAL, "gpa_op_register('%s'): n_attrs %u but attrs is NULL", d->name, d->n_attrs);
  for (uint32_t i = 0; i < d->n_attrs; i++) {
    const gpa_attr_spec *s = &d->attrs[i];
    if (!s->name || !s->name[0]) return gpa__fail(GPA_EINVAL, "gpa_op_register('%s'): attrs[%u] has no name", d->name, i);
    if (s->type != GPA_ATTR_INT && s->type != GPA_ATTR_FLOAT)
      return gpa__fail(GPA_EINVAL, "gpa_op_register('%s'): attribute '%s' has invalid type %d", d->name, s->name, s->type);
    if (s->offset % 8 || s->offset + 8 > d->params_size)
      return gpa__fail(GPA_EINVAL, "gpa_op_register('%s'): attribute '%s' offset %u is unaligned or outside params_size %u",
                       d->name, s->name, s->offset, d->params_size);
    for (uint32_t j = 0; j < i; j++) {
      if (!strcmp(d->attrs[j].name, s->name))
        return gpa__fail(GPA_EINVAL, "gpa_op_register('%s'): attribute '%s' listed twice", d->name, s->name);
      /* one would overwrite the other's value; it also bounds n_attrs
       * (GPA_OP_PARAMS_MAX / 8), which submit's matching relies on */
      if (d->attrs[j].offset == s->offset)
        return gpa__fail(GPA_EINVAL, "gpa_op_register('%s'): attributes '%s' and '%s' share offset %u", d->name,
                         d->attrs[j].name, s->name, s->offset);
    }
  }
  return GPA_OK;
}

gpa_status gpa_op_register(gpa_registry *reg, const gpa_op_desc *desc) {
  if (!reg || !desc) return gpa__fail(GPA_EINVAL, "gpa_op_register: NULL argument");
  gpa_status st = check_desc(desc);
  if (st != GPA_OK) return st;
  gpa__op *op = calloc(1, sizeof *op);
  if (!op) return gpa__fail(GPA_ENOMEM, "gpa_op_register: out of memory");
  memcpy(&op->d, desc, desc->size && desc->size < sizeof op->d ? desc->size : sizeof op->d); /* the rest stays 0 */
  op->d.size = sizeof op->d;
  op->d.max_outputs = desc_max_outputs(desc) > desc->n_outputs ? desc_max_outputs(desc) : desc->n_outputs;
  if (desc->cuda_kernel) {
    snprintf(op->kernel_buf, sizeof op->kernel_buf, "%s", desc->cuda_kernel);
    op->d.cuda_kernel = op->kernel_buf;
  }
  strcpy(op->name_buf, desc->name);
  op->d.name = op->name_buf;
  if (desc->n_attrs) {
    size_t names = 0;
    for (uint32_t i = 0; i < desc->n_attrs; i++) names += strlen(desc->attrs[i].name) + 1;
    op->attrs = malloc(desc->n_attrs * sizeof *op->attrs);
    op->attr_names = malloc(names);
    if (!op->attrs || !op->attr_names) {
      free(op->attrs);
      free(op->attr_names);
      free(op);
      return gpa__fail(GPA_ENOMEM, "gpa_op_register: out of memory");
    }
    char *p = op->attr_names;
    for (uint32_t i = 0; i < desc->n_attrs; i++) {
      op->attrs[i] = desc->attrs[i];
      size_t len = strlen(desc->attrs[i].name) + 1;
      memcpy(p, desc->attrs[i].name, len);
      op->attrs[i].name = p;
      p += len;
    }
    op->d.attrs = op->attrs;
  }
  pthread_mutex_lock(&reg->lock);
  bool found;
  uint32_t i = find_slot(reg, desc->name, &found);
  if (i == UINT32_MAX || (!found && reg->count >= GPA__REG_NAMES)) {
    pthread_mutex_unlock(&reg->lock);
    free(op->attrs);
    free(op->attr_names);
    free(op);
    return gpa__fail(GPA_ENOMEM, "gpa_op_register: registry full (%d names, GPA_MAX_OP_NAMES)", GPA__REG_NAMES);
  }
  op->next = atomic_load_explicit(&reg->slot[i], memory_order_relaxed);
  if (!found) reg->count++;
  atomic_store_explicit(&reg->slot[i], op, memory_order_release);
  pthread_mutex_unlock(&reg->lock);
  return GPA_OK;
}
