/* libbatchd-client's worker C ABI: run a model for a batchd daemon started with --backend
 * workers, from C or any language with a C FFI. The same contract as batchd::Worker (worker.hpp):
 * the worker attaches in the worker role, receives batches in shared memory and writes their
 * outputs there; if it crashes or hangs, the daemon runs its batches elsewhere.
 *
 *   batchd_worker_options options;
 *   batchd_worker_options_init(&options);
 *   options.name = "mymodel";
 *   batchd_worker* worker = batchd_worker_connect(&options, &status, &message);
 *   batchd_worker_serve(worker, my_model, my_state);   (until batchd_worker_stop or the daemon goes)
 *   batchd_worker_close(worker); */
#ifndef BATCHD_WORKER_H
#define BATCHD_WORKER_H

#include <stddef.h>
#include <stdint.h>

#include "batchd_client.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct batchd_worker_options {
  uint32_t struct_size;     /* sizeof(batchd_worker_options); set by batchd_worker_options_init */
  const char* socket_path;  /* NULL: the client's default (BATCHD_SOCKET, then the daemon's) */
  const char* name;         /* the model it serves, by name (docs/MODELS.md); NULL: "worker" */
  const char* version;      /* NULL: "0" */
  uint32_t concurrency;     /* batches run at once, one thread each (1 .. 16) */
  uint32_t max_inputs;      /* the largest batch this worker takes: inputs */
  uint64_t max_bytes;       /* and input bytes */
  uint32_t attach_timeout_ms;
  uint32_t spin_us;         /* spin this long for the next batch before sleeping */
} batchd_worker_options;

/* The defaults of batchd::WorkerOptions. */
void batchd_worker_options_init(batchd_worker_options* options);

typedef struct batchd_worker batchd_worker;
typedef struct batchd_worker_batch batchd_worker_batch;

/* A batch, valid during the handler's call only. Input i is
 * input_bytes[input_offsets[i] .. input_offsets[i + 1]); input_offsets has size + 1 entries, and
 * input_bytes is never NULL. */
size_t batchd_worker_batch_size(const batchd_worker_batch* batch);
const char* batchd_worker_batch_input_bytes(const batchd_worker_batch* batch);
const uint32_t* batchd_worker_batch_input_offsets(const batchd_worker_batch* batch);
/* Which of the worker's buffers (0 .. concurrency - 1) it came in on. */
uint32_t batchd_worker_batch_lane(const batchd_worker_batch* batch);
/* Appends the next output (in input order). 0 on success; non-zero when it does not fit (one
 * output past the daemon's --max-output-bytes, or past the batch's room): the batch fails. */
int batchd_worker_batch_append(batchd_worker_batch* batch, const char* bytes, size_t len);

/* Runs the model on one batch: one append per input. Returns 0 on success; non-zero fails the
 * whole batch with the NUL-terminated message written into error (error_size bytes), and the
 * daemon splits the batch until the failing input is alone. Called on concurrency threads at
 * once, each with its own batch. */
typedef int (*batchd_worker_handler)(void* context, batchd_worker_batch* batch, char* error, size_t error_size);

/* Attaches in the worker role. NULL on failure, with why in *status and, if message is not NULL,
 * a NUL-terminated message for a person in *message (free it with batchd_free). */
batchd_worker* batchd_worker_connect(const batchd_worker_options* options, batchd_status* status, char** message);

/* Serves batches until batchd_worker_stop (returns BATCHD_OK once the running batches were
 * answered) or until the daemon goes away or drops this worker (BATCHD_DAEMON_UNAVAILABLE). */
batchd_status batchd_worker_serve(batchd_worker* worker, batchd_worker_handler handler, void* context);

/* Any thread, and async-signal-safe: batchd_worker_serve stops gracefully. */
void batchd_worker_stop(batchd_worker* worker);

/* What the daemon granted: batches at once. */
uint32_t batchd_worker_concurrency(const batchd_worker* worker);

void batchd_worker_close(batchd_worker* worker);

#ifdef __cplusplus
}
#endif

#endif /* BATCHD_WORKER_H */
