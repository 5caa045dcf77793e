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
