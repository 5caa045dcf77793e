/* Shared by the test plug-ins: init that honours a few test switches in the config, and an echo
 * run (each output is its input). Test-only; a real plug-in lives in plugins/example. */
#ifndef BATCHD_TEST_ECHO_COMMON_H
#define BATCHD_TEST_ECHO_COMMON_H

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_plugin.h"

struct echo_state {
  atomic_int stopping; /* set by shutdown, read by runs on other threads */
  int extra_output;    /* wrong_count only: written in init, before any run */
};

/* config "init=fail": init fails with a message; "devices=0": reports no devices; else 2. */
static inline void* echo_init(const char* config, uint32_t* devices, uint32_t* streams_per_device,
                       char* error, size_t error_size) {
  if (strcmp(config, "init=fail") == 0) {
    snprintf(error, error_size, "init refused by its config");
    return NULL;
  }
  struct echo_state* state = calloc(1, sizeof *state);
  if (state == NULL) return NULL;
  *devices = strcmp(config, "devices=0") == 0 ? 0 : 2;
  *streams_per_device = 1;
  return state;
}

/* Echoes inputs [0, outputs). Returns 0, or -1 when the daemon refuses an append. */
static inline int echo_outputs(uint32_t outputs, const char* input_bytes,
                               const uint32_t* input_offsets,
                               const struct batchd_plugin_output* out) {
  for (uint32_t i = 0; i < outputs; ++i) {
    uint32_t begin = input_offsets[i];
    if (out->append(out->context, input_bytes + begin, input_offsets[i + 1] - begin) != 0) {
      return -1;
    }
  }
  return 0;
}

static inline void echo_shutdown(void* state) {
  atomic_store(&((struct echo_state*)state)->stopping, 1);
}

static inline void echo_destroy(void* state) { free(state); }

#endif /* BATCHD_TEST_ECHO_COMMON_H */
