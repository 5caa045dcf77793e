/* A worker written in C against batchd_worker.h (test_workers.cpp runs it): each output is "c:"
 * and the input; an input starting with "fail" fails its batch with a message. Stops on SIGTERM.
 * Usage: c_worker SOCKET */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "client_lib/batchd_worker.h"

static batchd_worker* g_worker;

static void on_sigterm(int sig) {
  (void)sig;
  batchd_worker_stop(g_worker);
}

static int model(void* context, batchd_worker_batch* batch, char* error, size_t error_size) {
  (void)context;
  const char* bytes = batchd_worker_batch_input_bytes(batch);
  const uint32_t* offsets = batchd_worker_batch_input_offsets(batch);
  char out[4096];
  for (size_t i = 0; i < batchd_worker_batch_size(batch); ++i) {
    const size_t len = offsets[i + 1] - offsets[i];
    if (len >= 4 && memcmp(bytes + offsets[i], "fail", 4) == 0) {
      snprintf(error, error_size, "the C model refuses '%.*s'", (int)len, bytes + offsets[i]);
      return 1;
    }
    if (len + 2 > sizeof(out)) {
      snprintf(error, error_size, "input too long for the C model");
      return 1;
    }
    memcpy(out, "c:", 2);
    memcpy(out + 2, bytes + offsets[i], len);
    if (batchd_worker_batch_append(batch, out, len + 2) != 0) return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: c_worker SOCKET\n");
    return 2;
  }
  batchd_worker_options options;
  batchd_worker_options_init(&options);
  options.socket_path = argv[1];
  options.name = "c-model";
  options.version = "0.1";
  options.concurrency = 2;
  batchd_status status;
  char* message = NULL;
  g_worker = batchd_worker_connect(&options, &status, &message);
  if (g_worker == NULL) {
    fprintf(stderr, "c_worker: %s: %s\n", batchd_status_name(status), message != NULL ? message : "");
    batchd_free(message);
    return 1;
  }
  signal(SIGTERM, on_sigterm);
  status = batchd_worker_serve(g_worker, model, NULL);
  batchd_worker_close(g_worker);
  return status == BATCHD_OK ? 0 : 3;
}
