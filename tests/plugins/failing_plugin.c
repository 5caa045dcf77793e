/* Test plug-in: echoes its inputs, but fails any batch that contains the input "fail" with the
 * message "refusing this batch", and any batch containing "fail-silently" with no message. A batch
 * containing "crash" aborts the process (run out of process by batchd-worker: a crashing model).
 * After shutdown() every run fails with "shutting down". */
#include "tests/plugins/echo_common.h"

static int contains(uint32_t count, const char* input_bytes, const uint32_t* input_offsets,
                    const char* wanted) {
  size_t wanted_len = strlen(wanted);
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t begin = input_offsets[i];
    if (input_offsets[i + 1] - begin == wanted_len &&
        memcmp(input_bytes + begin, wanted, wanted_len) == 0) {
      return 1;
    }
  }
  return 0;
}

static int failing_run(void* state, uint32_t device, uint32_t stream, uint32_t count,
                       const char* input_bytes, const uint32_t* input_offsets,
                       const struct batchd_plugin_output* out, char* error, size_t error_size) {
  (void)device;
  (void)stream;
  if (atomic_load(&((struct echo_state*)state)->stopping)) {
    snprintf(error, error_size, "shutting down");
    return 1;
  }
  if (contains(count, input_bytes, input_offsets, "crash")) abort();
  if (contains(count, input_bytes, input_offsets, "fail-silently")) return 7;
  if (contains(count, input_bytes, input_offsets, "fail")) {
    /* Half the outputs first: a failed batch's partial outputs must not leak to callers. */
    (void)echo_outputs(count / 2, input_bytes, input_offsets, out);
    snprintf(error, error_size, "refusing this batch\n");
    return -1;
  }
  return echo_outputs(count, input_bytes, input_offsets, out);
}

static const struct batchd_plugin kPlugin = {
    .abi_version = BATCHD_PLUGIN_ABI_VERSION,
    .name = "failing",
    .init = echo_init,
    .run = failing_run,
    .shutdown = echo_shutdown,
    .destroy = echo_destroy,
};

const struct batchd_plugin* batchd_plugin_v1(void) { return &kPlugin; }
