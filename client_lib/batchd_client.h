/* libbatchd-client C ABI: for callers in C and other languages. Stable across minor versions;
 * BATCHD_CLIENT_ABI_VERSION changes when it does not. Every function is thread-safe on one
 * client handle except batchd_client_close(). */
#ifndef BATCHD_CLIENT_H
#define BATCHD_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BATCHD_CLIENT_ABI_VERSION 1

typedef enum batchd_status {
  BATCHD_OK = 0,
  BATCHD_TIMEOUT = 1,
  BATCHD_OVERLOADED = 2,
  BATCHD_TOO_LARGE = 3,
  BATCHD_INVALID_UTF8 = 4,
  BATCHD_DAEMON_UNAVAILABLE = 5,
  BATCHD_BACKEND_ERROR = 6,
  BATCHD_BACKEND_UNAVAILABLE = 7,
  BATCHD_CANCELLED = 8,
  BATCHD_PROTOCOL_ERROR = 9,
  BATCHD_INVALID_ARGUMENT = 10,
  BATCHD_PERMISSION_DENIED = 11,
  BATCHD_TOO_MANY_CLIENTS = 12,
  BATCHD_UNKNOWN_MODEL = 13
} batchd_status;

/* A request's priority class: under load the daemon batches high first and sheds low first.
 * batchd_submit and batchd_submit_many send normal. */
typedef enum batchd_priority {
  BATCHD_PRIORITY_NORMAL = 0,
  BATCHD_PRIORITY_HIGH = 1,
  BATCHD_PRIORITY_LOW = 2
} batchd_priority;

typedef struct batchd_client batchd_client;

/* Connects to the daemon at socket_path (NULL: the default path), trying for up to
 * connect_timeout_ms. Returns NULL on failure and, if status is not NULL, why. */
batchd_client* batchd_client_connect(const char* socket_path, uint32_t connect_timeout_ms,
                                     batchd_status* status);

/* Sends one request and waits up to timeout_ms. On BATCHD_OK *output holds the answer (not
 * NUL-terminated; free it with batchd_free) and *output_len its length. On any other status
 * *output holds a NUL-terminated message for a person (also freed with batchd_free). */
batchd_status batchd_submit(batchd_client* client, const char* input, size_t input_len,
                            uint32_t timeout_ms, char** output, size_t* output_len);

/* One request of batchd_submit_many: the input in; status and output out, as batchd_submit
 * gives them (output freed with batchd_free, whatever the status). */
typedef struct batchd_request {
  const char* input;
  size_t input_len;
  batchd_status status;
  char* output;
  size_t output_len;
} batchd_request;

/* Sends count requests as one submission (one ring publication and at most one wake-up of the
 * daemon for all of them) and waits up to timeout_ms for their answers. Every request gets its
 * own status and output; one refused (too large, not UTF-8, no free slot) does not hold back the
 * others. Returns BATCHD_INVALID_ARGUMENT (and touches nothing) when client or requests is NULL
 * or an input is NULL with a non-zero length; otherwise BATCHD_OK. */
batchd_status batchd_submit_many(batchd_client* client, batchd_request* requests, size_t count,
                                 uint32_t timeout_ms);

/* batchd_submit in priority class `priority`. A priority that is not one of BATCHD_PRIORITY_*
 * returns BATCHD_INVALID_ARGUMENT and touches nothing. */
batchd_status batchd_submit_with_priority(batchd_client* client, const char* input, size_t input_len,
                                          uint32_t timeout_ms, char** output, size_t* output_len,
                                          batchd_priority priority);

/* batchd_submit_many with every request in priority class `priority`; an unknown priority is
 * BATCHD_INVALID_ARGUMENT, as for batchd_submit_with_priority. */
batchd_status batchd_submit_many_with_priority(batchd_client* client, batchd_request* requests,
                                               size_t count, uint32_t timeout_ms,
                                               batchd_priority priority);

/* batchd_submit_with_priority for the model named `model` (NUL-terminated; NULL or "": the
 * daemon's default model, batchstring). A model the daemon does not serve is
 * BATCHD_UNKNOWN_MODEL, with a message naming those it does. */
batchd_status batchd_submit_to_model(batchd_client* client, const char* model, const char* input,
                                     size_t input_len, uint32_t timeout_ms, char** output,
                                     size_t* output_len, batchd_priority priority);

/* batchd_submit_to_model, traced in the daemon under the caller's span: `traceparent` is a W3C
 * traceparent ("00-<32 hex>-<16 hex>-01", NUL-terminated; docs/TRACING.md). NULL, or one not
 * sampled (flags 00): the daemon's own sampling decides. One that is not a traceparent is
 * BATCHD_INVALID_ARGUMENT, and nothing is sent. */
batchd_status batchd_submit_traced(batchd_client* client, const char* model, const char* input, size_t input_len,
                                   uint32_t timeout_ms, char** output, size_t* output_len,
                                   batchd_priority priority, const char* traceparent);

/* batchd_submit_many_with_priority with every request for the model named `model`, as
 * batchd_submit_to_model takes it. */
batchd_status batchd_submit_many_to_model(batchd_client* client, const char* model,
                                          batchd_request* requests, size_t count,
                                          uint32_t timeout_ms, batchd_priority priority);

void batchd_free(void* buffer);

/* A short stable name for a status ("timeout", ...). Never NULL. */
const char* batchd_status_name(batchd_status status);

void batchd_client_close(batchd_client* client);

#ifdef __cplusplus
}
#endif

#endif /* BATCHD_CLIENT_H */
