// The C ABI over batchd::Client.
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include "client_lib/batchd_client.h"
#include "client_lib/c_status.hpp"
#include "client_lib/client.hpp"
#include "client_lib/traceparent.hpp"

using batchd::client_detail::to_status;

struct batchd_client {
  std::unique_ptr<batchd::Client> client;
};

namespace {

// What a C caller passed for a C enum: any int, which C lets through. Read by its bytes: loading a
// value outside the enum's range as the enum is undefined in C++ (clang's UBSan reports it).
template <typename Enum>
int c_value(const Enum& value) noexcept {
  static_assert(sizeof(Enum) == sizeof(int));
  int out = 0;
  std::memcpy(&out, &value, sizeof out);
  return out;
}

// The class a C caller named, or nothing for a value outside the enum.
std::optional<batchd::Priority> from_c(batchd_priority priority) noexcept {
  switch (c_value(priority)) {
    case BATCHD_PRIORITY_NORMAL: return batchd::Priority::kNormal;
    case BATCHD_PRIORITY_HIGH: return batchd::Priority::kHigh;
    case BATCHD_PRIORITY_LOW: return batchd::Priority::kLow;
  }
  return std::nullopt;
}

// NULL: the default model (an empty name).
std::string_view model_name(const char* model) noexcept {
  return model != nullptr ? std::string_view(model) : std::string_view();
}

char* copy_out(const std::string& text, bool terminate) noexcept {
  char* buffer = static_cast<char*>(std::malloc(text.size() + (terminate ? 1 : 0) + 1));
  if (buffer == nullptr) return nullptr;
  std::memcpy(buffer, text.data(), text.size());
  buffer[text.size()] = '\0';
  return buffer;
}

}  // namespace

extern "C" {

batchd_client* batchd_client_connect(const char* socket_path, uint32_t connect_timeout_ms,
                                     batchd_status* status) {
  try {
    batchd::ClientOptions options;
    if (socket_path != nullptr) options.socket_path = socket_path;
    options.connect_timeout = std::chrono::milliseconds(connect_timeout_ms);
    batchd::Error error;
    auto client = batchd::Client::connect(options, &error);
    if (!client) {
      if (status != nullptr) *status = to_status(error.code);
      return nullptr;
    }
    if (status != nullptr) *status = BATCHD_OK;
    return new batchd_client{std::move(client)};
  } catch (...) {
    if (status != nullptr) *status = BATCHD_DAEMON_UNAVAILABLE;
    return nullptr;
  }
}

batchd_status batchd_submit(batchd_client* client, const char* input, size_t input_len,
                            uint32_t timeout_ms, char** output, size_t* output_len) {
  return batchd_submit_with_priority(client, input, input_len, timeout_ms, output, output_len,
                                     BATCHD_PRIORITY_NORMAL);
}

batchd_status batchd_submit_with_priority(batchd_client* client, const char* input, size_t input_len,
                                          uint32_t timeout_ms, char** output, size_t* output_len,
                                          batchd_priority priority) {
  return batchd_submit_to_model(client, nullptr, input, input_len, timeout_ms, output, output_len, priority);
}

batchd_status batchd_submit_to_model(batchd_client* client, const char* model, const char* input,
                                     size_t input_len, uint32_t timeout_ms, char** output,
                                     size_t* output_len, batchd_priority priority) {
  return batchd_submit_traced(client, model, input, input_len, timeout_ms, output, output_len, priority, nullptr);
}

batchd_status batchd_submit_traced(batchd_client* client, const char* model, const char* input, size_t input_len,
                                   uint32_t timeout_ms, char** output, size_t* output_len,
                                   batchd_priority priority, const char* traceparent) {
  const std::optional<batchd::Priority> cls = from_c(priority);
  std::optional<batchd::TraceParent> parent;
  if (traceparent != nullptr) parent = batchd::parse_traceparent(traceparent);
  if (client == nullptr || (input == nullptr && input_len != 0) || output == nullptr ||
      output_len == nullptr || !cls || (traceparent != nullptr && !parent)) {
    return BATCHD_INVALID_ARGUMENT;
  }
  // An unsampled context is left to the daemon's sampler, as none.
  const batchd::shm::TraceContext trace = parent && parent->sampled ? parent->context : batchd::shm::TraceContext{};
  try {
    batchd::Result result = client->client->submit(std::string_view(input, input_len),
                                                   std::chrono::milliseconds(timeout_ms),
                                                   batchd::RequestOptions{*cls, model_name(model), 0, trace});
    const std::string& text = result.ok() ? result.output() : result.error().message;
    *output = copy_out(text, !result.ok());
    *output_len = text.size();
    return result.ok() ? BATCHD_OK : to_status(result.error().code);
  } catch (...) {
    *output = nullptr;
    *output_len = 0;
    return BATCHD_PROTOCOL_ERROR;
  }
}

batchd_status batchd_submit_many(batchd_client* client, batchd_request* requests, size_t count,
                                 uint32_t timeout_ms) {
  return batchd_submit_many_with_priority(client, requests, count, timeout_ms, BATCHD_PRIORITY_NORMAL);
}

batchd_status batchd_submit_many_with_priority(batchd_client* client, batchd_request* requests,
                                               size_t count, uint32_t timeout_ms,
                                               batchd_priority priority) {
  return batchd_submit_many_to_model(client, nullptr, requests, count, timeout_ms, priority);
}

batchd_status batchd_submit_many_to_model(batchd_client* client, const char* model,
                                          batchd_request* requests, size_t count,
                                          uint32_t timeout_ms, batchd_priority priority) {
  const std::optional<batchd::Priority> cls = from_c(priority);
  if (client == nullptr || (requests == nullptr && count != 0) || !cls) return BATCHD_INVALID_ARGUMENT;
  for (size_t i = 0; i < count; ++i) {
    if (requests[i].input == nullptr && requests[i].input_len != 0) return BATCHD_INVALID_ARGUMENT;
  }
  try {
    std::vector<std::string_view> inputs;
    inputs.reserve(count);
    for (size_t i = 0; i < count; ++i) inputs.emplace_back(requests[i].input, requests[i].input_len);
    std::vector<batchd::Result> results =
        client->client->submit_many(inputs, std::chrono::milliseconds(timeout_ms),
                                    batchd::RequestOptions{*cls, model_name(model)});
    for (size_t i = 0; i < count; ++i) {
      const batchd::Result& result = results[i];
      const std::string& text = result.ok() ? result.output() : result.error().message;
      requests[i].output = copy_out(text, !result.ok());
      requests[i].output_len = text.size();
      requests[i].status = result.ok() ? BATCHD_OK : to_status(result.error().code);
    }
    return BATCHD_OK;
  } catch (...) {
    for (size_t i = 0; i < count; ++i) {
      requests[i].output = nullptr;
      requests[i].output_len = 0;
      requests[i].status = BATCHD_PROTOCOL_ERROR;
    }
    return BATCHD_OK;
  }
}

void batchd_free(void* buffer) { std::free(buffer); }

const char* batchd_status_name(batchd_status status) {
  switch (c_value(status)) {
    case BATCHD_OK: return "ok";
    case BATCHD_INVALID_ARGUMENT: return "invalid_argument";
    case BATCHD_TIMEOUT: return batchd::error_code_name(batchd::ErrorCode::kTimeout);
    case BATCHD_OVERLOADED: return batchd::error_code_name(batchd::ErrorCode::kOverloaded);
    case BATCHD_TOO_LARGE: return batchd::error_code_name(batchd::ErrorCode::kTooLarge);
    case BATCHD_INVALID_UTF8: return batchd::error_code_name(batchd::ErrorCode::kInvalidUtf8);
    case BATCHD_DAEMON_UNAVAILABLE: return batchd::error_code_name(batchd::ErrorCode::kDaemonUnavailable);
    case BATCHD_BACKEND_ERROR: return batchd::error_code_name(batchd::ErrorCode::kBackendError);
    case BATCHD_BACKEND_UNAVAILABLE: return batchd::error_code_name(batchd::ErrorCode::kBackendUnavailable);
    case BATCHD_CANCELLED: return batchd::error_code_name(batchd::ErrorCode::kCancelled);
    case BATCHD_PROTOCOL_ERROR: return batchd::error_code_name(batchd::ErrorCode::kProtocolError);
    case BATCHD_PERMISSION_DENIED: return batchd::error_code_name(batchd::ErrorCode::kPermissionDenied);
    case BATCHD_TOO_MANY_CLIENTS: return batchd::error_code_name(batchd::ErrorCode::kTooManyClients);
    case BATCHD_UNKNOWN_MODEL: return batchd::error_code_name(batchd::ErrorCode::kUnknownModel);
  }
  return "unknown";
}

void batchd_client_close(batchd_client* client) { delete client; }

}  // extern "C"
