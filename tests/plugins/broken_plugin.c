/* Test plug-ins the loader must refuse, one per build variant (see meson.build):
 * BROKEN_BAD_ABI (abi_version 999), BROKEN_NULL_RUN (no run function), BROKEN_NULL_STRUCT (the
 * entry point returns NULL), BROKEN_NO_ENTRY (no batchd_plugin_v1 symbol at all). */
#include "tests/plugins/echo_common.h"

#ifndef BROKEN_NULL_RUN
static int broken_run(void* state, uint32_t device, uint32_t stream, uint32_t count,
                      const char* input_bytes, const uint32_t* input_offsets,
                      const struct batchd_plugin_output* out, char* error, size_t error_size) {
  (void)state;
  (void)device;
  (void)stream;
  (void)error;
  (void)error_size;
  return echo_outputs(count, input_bytes, input_offsets, out);
}
#endif

static const struct batchd_plugin kPlugin = {
#ifdef BROKEN_BAD_ABI
    .abi_version = 999,
#else
    .abi_version = BATCHD_PLUGIN_ABI_VERSION,
#endif
    .name = "broken",
    .init = echo_init,
#ifdef BROKEN_NULL_RUN
    .run = NULL,
#else
    .run = broken_run,
#endif
    .shutdown = echo_shutdown,
    .destroy = echo_destroy,
};

#ifdef BROKEN_NO_ENTRY
/* Exported under another name, so the library loads but has no entry point. */
BATCHD_PLUGIN_EXPORT const struct batchd_plugin* not_a_batchd_plugin(void);
const struct batchd_plugin* not_a_batchd_plugin(void) { return &kPlugin; }
#elif defined(BROKEN_NULL_STRUCT)
const struct batchd_plugin* batchd_plugin_v1(void) {
  (void)kPlugin;
  return NULL;
}
#else
const struct batchd_plugin* batchd_plugin_v1(void) { return &kPlugin; }
#endif
