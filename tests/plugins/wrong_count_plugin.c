/* Test plug-in: answers every batch with one output too few, and reports success. With config
 * "extra=1" it appends one output too many instead, to check that the daemon refuses it. */
#include "tests/plugins/echo_common.h"

static void* wrong_count_init(const char* config, uint32_t* devices, uint32_t* streams_per_device,
                              char* error, size_t error_size) {
  int extra = strcmp(config, "extra=1") == 0;
  struct echo_state* state =
      echo_init(extra ? "" : config, devices, streams_per_device, error, error_size);
  if (state != NULL) state->extra_output = extra;
  return state;
}

static int wrong_count_run(void* state, uint32_t device, uint32_t stream, uint32_t count,
                           const char* input_bytes, const uint32_t* input_offsets,
                           const struct batchd_plugin_output* out, char* error,
                           size_t error_size) {
  (void)device;
  (void)stream;
  (void)error;
  (void)error_size;
  if (((const struct echo_state*)state)->extra_output) {
    (void)echo_outputs(count, input_bytes, input_offsets, out);
    (void)out->append(out->context, "extra", 5);
    return 0; /* success despite the refused append: the daemon must not believe it */
  }
  return echo_outputs(count - 1, input_bytes, input_offsets, out);
}

static const struct batchd_plugin kPlugin = {
    .abi_version = BATCHD_PLUGIN_ABI_VERSION,
    .name = "wrong_count",
    .init = wrong_count_init,
    .run = wrong_count_run,
    .shutdown = echo_shutdown,
    .destroy = echo_destroy,
};

const struct batchd_plugin* batchd_plugin_v1(void) { return &kPlugin; }
