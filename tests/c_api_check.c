/* Compiled as C: proves batchd_client.h is a C header, and drives the C ABI end to end. */
#include <string.h>

#include "client_lib/batchd_client.h"

int c_api_roundtrip(const char* socket_path, const char* input, char* out, size_t out_size) {
  batchd_status status = BATCHD_OK;
  batchd_client* client = batchd_client_connect(socket_path, 2000, &status);
  if (client == NULL) return (int)status;
  char* output = NULL;
  size_t len = 0;
  status = batchd_submit(client, input, strlen(input), 5000, &output, &len);
  if (output != NULL) {
    size_t n = len < out_size - 1 ? len : out_size - 1;
    memcpy(out, output, n);
    out[n] = '\0';
    batchd_free(output);
  }
  batchd_client_close(client);
  return (int)status;
}

/* The priority entry points, as a C caller writes them: one request and a batch of `count`, all
 * in class `priority`. Returns the first status that is not BATCHD_OK (or BATCHD_OK), and fills
 * *answered with how many came back BATCHD_OK. The answers themselves are freed unread. */
int c_api_priority_round(const char* socket_path, batchd_priority priority, size_t count, size_t* answered) {
  batchd_status status = BATCHD_OK;
  *answered = 0;
  batchd_client* client = batchd_client_connect(socket_path, 2000, &status);
  if (client == NULL) return (int)status;
  char* output = NULL;
  size_t len = 0;
  status = batchd_submit_with_priority(client, "one", 3, 5000, &output, &len, priority);
  batchd_free(output);
  if (status == BATCHD_OK) ++*answered;
  batchd_request requests[16];
  if (count > 16) count = 16;
  memset(requests, 0, sizeof(requests));
  for (size_t i = 0; i < count; ++i) {
    requests[i].input = "many";
    requests[i].input_len = 4;
  }
  batchd_status many = batchd_submit_many_with_priority(client, requests, count, 5000, priority);
  for (size_t i = 0; many == BATCHD_OK && i < count; ++i) {
    if (requests[i].status == BATCHD_OK) ++*answered;
    else if (status == BATCHD_OK) status = requests[i].status;
    batchd_free(requests[i].output);
  }
  if (status == BATCHD_OK) status = many;
  batchd_client_close(client);
  return (int)status;
}

/* batchd_submit_traced as a C caller writes it: one request under `traceparent` (NULL: none).
 * Returns its status; the answer is freed unread. */
int c_api_traced(const char* socket_path, const char* traceparent) {
  batchd_status status = BATCHD_OK;
  batchd_client* client = batchd_client_connect(socket_path, 2000, &status);
  if (client == NULL) return (int)status;
  char* output = NULL;
  size_t len = 0;
  status = batchd_submit_traced(client, NULL, "traced", 6, 5000, &output, &len, BATCHD_PRIORITY_NORMAL, traceparent);
  batchd_free(output);
  batchd_client_close(client);
  return (int)status;
}

/* batchd_status_name of any int, as a C caller may pass one: in C a value outside the enum is
 * just an int (in C++ it would be undefined to make one). */
const char* c_api_status_name(int status) { return batchd_status_name((batchd_status)status); }
