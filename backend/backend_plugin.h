/* batchd plug-in C ABI: a user's own batchstring as a shared library, loaded with
 *   batchd --backend plugin:/path/libmine.so --plugin-config 'key=value;...'
 *
 * A plug-in exports one function, batchd_plugin_v1(), that returns a pointer to a static
 * `struct batchd_plugin`. The daemon checks abi_version against BATCHD_PLUGIN_ABI_VERSION and
 * refuses a mismatch; any incompatible change to this file bumps the version and renames the
 * entry symbol (batchd_plugin_v2, ...), so an old plug-in is refused at load, never misread.
 * Plain C99; see docs/PLUGINS.md for a walk-through and the example in plugins/example/.
 *
 * Lifetime, in order:
 *   1. init(config)          once, before anything else.
 *   2. run(...)              any number of times, concurrently for distinct (device, stream)
 *                            pairs, at most one call per pair at a time.
 *   3. shutdown(state)       at most once, from another thread, possibly while runs are in
 *                            progress (optional; may be NULL).
 *   4. destroy(state)        once, after every run has returned. Then the library is unloaded,
 *                            so no thread the plug-in started may outlive destroy().
 *
 * Errors: init and run report failure through their return value plus a NUL-terminated message
 * written into the caller's `error` buffer of `error_size` bytes (error_size >= 256; the buffer
 * is zeroed before each call). Keep messages short and printable ASCII: the daemon passes them
 * to the callers whose requests failed, with other bytes shown as '?'.
 * Nothing may unwind through this ABI: a C++ plug-in catches its exceptions at every entry point.
 * A crash inside a plug-in (a segfault, abort) takes the daemon down with it. */
#ifndef BATCHD_BACKEND_PLUGIN_H
#define BATCHD_BACKEND_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BATCHD_PLUGIN_ABI_VERSION 1
#define BATCHD_PLUGIN_ENTRY_SYMBOL "batchd_plugin_v1"

/* Plug-ins built with -fvisibility=hidden still export their entry point through this. */
#if defined(__GNUC__)
#define BATCHD_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define BATCHD_PLUGIN_EXPORT
#endif

/* Where run() puts its outputs. Owned by the daemon and valid only during that run() call.
 * append() copies `len` bytes (bytes may be NULL when len == 0) as the next output, in input
 * order, before it returns; call it once per input. It returns 0 on success and non-zero when
 * the daemon refuses the output (more outputs than inputs, more than 1 GiB in total, out of
 * memory): stop and return non-zero, the batch has failed whatever run() returns.
 * Call it from one thread at a time, and never after run() has returned. */
struct batchd_plugin_output {
  void* context;
  int (*append)(void* context, const char* bytes, size_t len);
};

struct batchd_plugin {
  /* BATCHD_PLUGIN_ABI_VERSION as the plug-in was compiled. */
  uint32_t abi_version;

  /* A short name for logs and error messages ("example"); NUL-terminated, static storage. */
  const char* name;

  /* Required. Parses `config` (NUL-terminated, never NULL, "" when none was given; borrowed for
   * this call only) and sets *devices (>= 1) and, optionally, *streams_per_device (the daemon
   * sets it to 1 beforehand). Returns the plug-in's state, handed back to every other call and
   * owned by the plug-in until destroy(); NULL on failure, with a message in `error`. */
  void* (*init)(const char* config, uint32_t* devices, uint32_t* streams_per_device, char* error,
                size_t error_size);

  /* Required. Computes one output per input, passed to out->append in input order.
   * Input i is input_bytes[input_offsets[i] .. input_offsets[i + 1]); input_offsets has count + 1
   * entries and input_offsets[0] == 0; the bytes are valid UTF-8, not NUL-terminated, and
   * input_bytes is never NULL (every input empty or not). count >= 1.
   * All of it is borrowed for this call only. device < devices, stream < streams_per_device.
   * Returns 0 on success; non-zero fails the whole batch, with a message in `error` (the daemon
   * then retries smaller parts of the batch to find the input that fails). */
  int (*run)(void* state, uint32_t device, uint32_t stream, uint32_t count,
             const char* input_bytes, const uint32_t* input_offsets,
             const struct batchd_plugin_output* out, char* error, size_t error_size);

  /* Optional (may be NULL). The daemon is stopping: runs blocked waiting on something should
   * return soon, with any status. Must be safe to call concurrently with run(). */
  void (*shutdown)(void* state);

  /* Required. Frees the state and joins any thread the plug-in started. */
  void (*destroy)(void* state);
};

/* Optional: a plug-in may also export batchd_plugin_v1_flags(), returning an OR of the flags
 * below (one without it has none; the struct above is unchanged, so this is not an ABI break).
 * BATCHD_PLUGIN_RUNS_INLINE: run() takes microseconds, never blocks, and is safe to call from any
 * thread at once, even twice for the same (device, stream). The daemon may then run small
 * batches on its drain thread instead of handing them to a lane's worker (a wake-up that costs
 * more than such a run); see --inline-max-us. */
#define BATCHD_PLUGIN_FLAGS_SYMBOL "batchd_plugin_v1_flags"
#define BATCHD_PLUGIN_RUNS_INLINE 1u
typedef uint32_t (*batchd_plugin_flags_fn)(void);

/* The entry point a plug-in defines (and the daemon looks up by name). Returns a pointer to a
 * struct with static storage duration, or NULL if the plug-in cannot run at all. */
typedef const struct batchd_plugin* (*batchd_plugin_entry_fn)(void);
BATCHD_PLUGIN_EXPORT const struct batchd_plugin* batchd_plugin_v1(void);

#ifdef __cplusplus
}
#endif

#endif /* BATCHD_BACKEND_PLUGIN_H */
