/* Feed sessions: internal structures.
 *
 * Threads: pushes travel to the actor as control messages, so the session's
 * infeed list is actor-only. Outfeed ops run on the actor; once their copies
 * land they are put in submission order (per session) and moved to the
 * delivery list, which the session's sink thread or gpa_outfeed_pop takes
 * from under `lock`. The delivering side completes the op's handle. Room in
 * the outfeed is reserved when an outfeed op starts (`out_pending`) and given
 * back at delivery; a queue parked for room is woken by a control message
 * that the delivering side sends when `out_waiters` is set.
 *
 * Lifetime: `refs` counts the user (until gpa_feed_close), and every message
 * naming the session until it completes. */
#ifndef GPA_FEED_INTERNAL_H
#define GPA_FEED_INTERNAL_H
#include "actor/internal.h"

typedef struct gpa__feed_item {
  struct gpa__feed_item *next;
  uint32_t n;
  gpa_host_tensor t[]; /* data points into this block, after the array */
} gpa__feed_item;

struct gpa_feed {
  gpa_actor *a;
  uint64_t id;
  unsigned char tag[GPA_FEED_TAG_MAX];
  uint32_t tag_len;
  gpa_outfeed_fn sink;
  void *user_data;
  uint32_t out_cap, in_cap;
  int32_t policy;
  _Atomic int closed;
  _Atomic uint32_t refs;
  _Atomic uint32_t in_count;    /* pushed, not taken */
  _Atomic uint32_t out_pending; /* outfeed ops started, not delivered */
  _Atomic int out_waiters;      /* a queue is parked for outfeed room */
  struct gpa_feed *next;        /* the actor's list (gpa__feeds.lock) */
  /* actor thread only */
  gpa__feed_item *in_head, *in_tail;
  uint64_t out_seq;     /* next outfeed op's place */
  uint64_t landed_seq;  /* next place to hand to delivery */
  gpa__msg *reorder;    /* landed early, by place */
  /* delivery */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  gpa__msg *dq_head, *dq_tail;
  _Atomic uint32_t dq_len; /* lets gpa_outfeed_pop spin before it sleeps */
  bool stop;
  bool has_thread;
  pthread_t thread;
};

/* The actor's sessions (its extension state: actor/hooks.h). */
typedef struct gpa__feeds {
  pthread_mutex_t lock;
  gpa_feed *list;
  uint64_t next_id;
} gpa__feeds;
extern const gpa__ext gpa__feed_ext;
/* The classes of infeed and outfeed messages (feed_exec.c). */
extern const gpa__msg_class gpa__infeed_class, gpa__outfeed_class;

/* The params block of infeed/outfeed messages. */
typedef struct gpa__feed_params {
  gpa_feed *s;
  int64_t timeout_ns;
  uint64_t seq;     /* outfeed: place in the session's delivery order */
  int32_t reserved; /* outfeed: holds a unit of the session's room */
  int32_t placed;   /* outfeed: seq is assigned */
} gpa__feed_params;

void gpa__feed_ref(gpa_feed *s);
void gpa__feed_unref(gpa_feed *s);
/* An item block for n tensors of bytes[i] bytes each: t[i].data and
 * t[i].bytes are set, the rest is the caller's. NULL on overflow or OOM. */
gpa__feed_item *gpa__feed_item_new(uint32_t n, const uint64_t *bytes);
/* Actor thread: frees items nobody took and cancels landed items waiting
 * for their turn (close, shutdown). */
void gpa__feed_drop_pending(gpa_feed *s);
void gpa__feed_delivered(gpa_feed *s, gpa__msg *m, gpa_status st, bool keep_ref);
/* Delivery side: an item was delivered (or dropped); give back its room. */
void gpa__feed_room(gpa_feed *s);

#endif
