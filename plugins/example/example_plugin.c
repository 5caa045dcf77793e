/* An example batchd plug-in: the reference batchstring (lowercase hex SHA-256 of each input,
 * iterated `cost` times) behind the plug-in C ABI. A starting point for your own: copy this
 * file, keep the shape (parse config in init, no shared mutable state in run), change run_one.
 *
 * Config: semicolon-separated key=value pairs, all optional: "cost=3;devices=2;streams=1". */
#include <openssl/sha.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_plugin.h"

enum { kHexBytes = 2 * SHA256_DIGEST_LENGTH };

/* Read-only after init, so concurrent runs on different lanes share it without locks. */
struct example_state {
  uint32_t cost;
};

struct example_settings {
  uint32_t cost;
  uint32_t devices;
  uint32_t streams;
};

/* A decimal number from 1 to 999999999; 0 on anything else. */
static uint32_t parse_positive(const char* text, size_t len) {
  uint32_t value = 0;
  if (len == 0 || len > 9) return 0;
  for (size_t i = 0; i < len; ++i) {
    if (text[i] < '0' || text[i] > '9') return 0;
    value = value * 10 + (uint32_t)(text[i] - '0');
  }
  return value;
}

/* Applies one "key=value" setting; on error writes a message and returns -1. */
static int apply_setting(const char* item, size_t len, struct example_settings* settings,
                         char* error, size_t error_size) {
  const char* equals = memchr(item, '=', len);
  if (equals == NULL) {
    snprintf(error, error_size, "config item '%.*s' is not key=value", (int)len, item);
    return -1;
  }
  size_t key_len = (size_t)(equals - item);
  uint32_t value = parse_positive(equals + 1, len - key_len - 1);
  uint32_t* target = NULL;
  if (key_len == 4 && memcmp(item, "cost", 4) == 0) target = &settings->cost;
  if (key_len == 7 && memcmp(item, "devices", 7) == 0) target = &settings->devices;
  if (key_len == 7 && memcmp(item, "streams", 7) == 0) target = &settings->streams;
  if (target == NULL) {
    snprintf(error, error_size, "unknown config key '%.*s' (known: cost, devices, streams)",
             (int)key_len, item);
    return -1;
  }
  if (value == 0) {
    snprintf(error, error_size, "config '%.*s': want a whole number from 1 to 999999999",
             (int)len, item);
    return -1;
  }
  *target = value;
  return 0;
}

static int parse_config(const char* config, struct example_settings* settings, char* error,
                        size_t error_size) {
  const char* item = config;
  while (*item != '\0') {
    size_t len = strcspn(item, ";");
    if (len > 0 && apply_setting(item, len, settings, error, error_size) != 0) return -1;
    item += len;
    if (*item == ';') ++item;
  }
  return 0;
}

static void* example_init(const char* config, uint32_t* devices, uint32_t* streams_per_device,
                          char* error, size_t error_size) {
  struct example_settings settings = {1, 1, 1};
  if (parse_config(config, &settings, error, error_size) != 0) return NULL;
  struct example_state* state = malloc(sizeof *state);
  if (state == NULL) {
    snprintf(error, error_size, "out of memory");
    return NULL;
  }
  state->cost = settings.cost;
  *devices = settings.devices;
  *streams_per_device = settings.streams;
  return state;
}

static void to_hex(const unsigned char* digest, char* out) {
  static const char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < SHA256_DIGEST_LENGTH; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 0xF];
  }
}

/* Round i hashes the hex text of round i - 1. */
static void run_one(const char* input, size_t len, uint32_t cost, char* hex) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256((const unsigned char*)input, len, digest);
  to_hex(digest, hex);
  for (uint32_t round = 1; round < cost; ++round) {
    SHA256((const unsigned char*)hex, kHexBytes, digest);
    to_hex(digest, hex);
  }
}

static int example_run(void* state, uint32_t device, uint32_t stream, uint32_t count,
                       const char* input_bytes, const uint32_t* input_offsets,
                       const struct batchd_plugin_output* out, char* error, size_t error_size) {
  const struct example_state* self = state;
  (void)device; /* every lane computes the same function on the CPU */
  (void)stream;
  for (uint32_t i = 0; i < count; ++i) {
    char hex[kHexBytes];
    uint32_t begin = input_offsets[i];
    run_one(input_bytes + begin, input_offsets[i + 1] - begin, self->cost, hex);
    if (out->append(out->context, hex, kHexBytes) != 0) {
      snprintf(error, error_size, "the daemon refused output %u", (unsigned)i);
      return -1;
    }
  }
  return 0;
}

static void example_destroy(void* state) { free(state); }

static const struct batchd_plugin kExamplePlugin = {
    .abi_version = BATCHD_PLUGIN_ABI_VERSION,
    .name = "example",
    .init = example_init,
    .run = example_run,
    .shutdown = NULL, /* run never blocks, so there is nothing to wake */
    .destroy = example_destroy,
};

const struct batchd_plugin* batchd_plugin_v1(void) { return &kExamplePlugin; }

/* run() keeps no state between calls and never blocks: the daemon may run small batches on its
 * drain thread (a CPU plug-in's win; a GPU one would leave this out). */
BATCHD_PLUGIN_EXPORT uint32_t batchd_plugin_v1_flags(void) { return BATCHD_PLUGIN_RUNS_INLINE; }
