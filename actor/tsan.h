/* ThreadSanitizer annotations for libck.
 *
 * ck_ring orders its slots with ck_pr fences (inline assembly), which TSan
 * cannot see: it would report every ring slot as a race. In TSan builds the
 * ring's own slot accesses are hidden from TSan, and the happens-before edge
 * the ring really provides is stated on the message itself (release before
 * enqueue, acquire after dequeue), so TSan still checks every access to the
 * message. Outside TSan builds these are no-ops. */
#ifndef GPA_ACTOR_TSAN_H
#define GPA_ACTOR_TSAN_H

#if defined(GPA_TSAN)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
void __tsan_ignore_thread_begin(void);
void __tsan_ignore_thread_end(void);
#define GPA_TSAN_RELEASE(p) __tsan_release(p)
#define GPA_TSAN_ACQUIRE(p) __tsan_acquire(p)
#define GPA_TSAN_IGNORE_BEGIN() __tsan_ignore_thread_begin()
#define GPA_TSAN_IGNORE_END() __tsan_ignore_thread_end()
#else
#define GPA_TSAN_RELEASE(p) ((void)0)
#define GPA_TSAN_ACQUIRE(p) ((void)0)
#define GPA_TSAN_IGNORE_BEGIN() ((void)0)
#define GPA_TSAN_IGNORE_END() ((void)0)
#endif

#endif
