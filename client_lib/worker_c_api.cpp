// The worker C ABI over batchd::Worker.
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "client_lib/batchd_worker.h"
#include "client_lib/c_status.hpp"
#include "client_lib/worker.hpp"

struct batchd_worker {
  std::unique_ptr<batchd::Worker> worker;
};

struct batchd_worker_batch {
  batchd::WorkerBatch* batch;
};

namespace {

constexpr std::size_t kErrorBytes = 256;

char* copy_message(const std::string& text) noexcept {
  char* buffer = static_cast<char*>(std::malloc(text.size() + 1));
  if (buffer == nullptr) return nullptr;
  std::memcpy(buffer, text.c_str(), text.size() + 1);
  return buffer;
}

}  // namespace

extern "C" {

void batchd_worker_options_init(batchd_worker_options* options) {
  if (options == nullptr) return;
  const batchd::WorkerOptions defaults;
  *options = batchd_worker_options{};
  options->struct_size = sizeof(batchd_worker_options);
  options->concurrency = defaults.concurrency;
  options->max_inputs = defaults.max_inputs;
  options->max_bytes = defaults.max_bytes;
  options->attach_timeout_ms = static_cast<uint32_t>(defaults.attach_timeout.count());
  options->spin_us = static_cast<uint32_t>(defaults.spin.count());
}

size_t batchd_worker_batch_size(const batchd_worker_batch* batch) { return batch->batch->size(); }

const char* batchd_worker_batch_input_bytes(const batchd_worker_batch* batch) {
  // Never NULL, even when every input is empty: a caller may add an offset to it.
  const char* bytes = batch->batch->input_bytes().data();
  return bytes != nullptr ? bytes : "";
}

const uint32_t* batchd_worker_batch_input_offsets(const batchd_worker_batch* batch) {
  return batch->batch->input_offsets().data();
}

uint32_t batchd_worker_batch_lane(const batchd_worker_batch* batch) { return batch->batch->lane(); }

int batchd_worker_batch_append(batchd_worker_batch* batch, const char* bytes, size_t len) {
  if (bytes == nullptr && len != 0) return -1;
  return batch->batch->append(std::string_view(bytes == nullptr ? "" : bytes, len)) ? 0 : -1;
}

batchd_worker* batchd_worker_connect(const batchd_worker_options* options, batchd_status* status, char** message) {
  const auto fail = [&](batchd_status why, const std::string& text) -> batchd_worker* {
    if (status != nullptr) *status = why;
    if (message != nullptr) *message = copy_message(text);
    return nullptr;
  };
  if (options == nullptr || options->struct_size < sizeof(batchd_worker_options)) {
    return fail(BATCHD_INVALID_ARGUMENT, "batchd_worker_connect: options not set up with batchd_worker_options_init");
  }
  try {
    batchd::WorkerOptions o;
    if (options->socket_path != nullptr) o.socket_path = options->socket_path;
    if (options->name != nullptr) o.name = options->name;
    if (options->version != nullptr) o.version = options->version;
    o.concurrency = options->concurrency;
    o.max_inputs = options->max_inputs;
    o.max_bytes = options->max_bytes;
    o.attach_timeout = std::chrono::milliseconds(options->attach_timeout_ms);
    o.spin = std::chrono::microseconds(options->spin_us);
    batchd::Error error;
    auto worker = batchd::Worker::connect(o, &error);
    if (!worker) return fail(batchd::client_detail::to_status(error.code), error.message);
    if (status != nullptr) *status = BATCHD_OK;
    if (message != nullptr) *message = nullptr;
    return new batchd_worker{std::move(worker)};
  } catch (const std::exception& e) {
    return fail(BATCHD_PROTOCOL_ERROR, e.what());
  }
}

batchd_status batchd_worker_serve(batchd_worker* worker, batchd_worker_handler handler, void* context) {
  if (worker == nullptr || handler == nullptr) return BATCHD_INVALID_ARGUMENT;
  try {
    const batchd::WorkerEnd end = worker->worker->serve([&](batchd::WorkerBatch& batch) {
      batchd_worker_batch view{&batch};
      char error[kErrorBytes] = {};
      if (handler(context, &view, error, sizeof(error)) != 0) {
        error[sizeof(error) - 1] = '\0';
        throw std::runtime_error(error[0] != '\0' ? error : "the model failed the batch");
      }
    });
    return end == batchd::WorkerEnd::kStopped ? BATCHD_OK : BATCHD_DAEMON_UNAVAILABLE;
  } catch (const std::exception&) {
    return BATCHD_PROTOCOL_ERROR;  // threads could not start
  }
}

void batchd_worker_stop(batchd_worker* worker) {
  if (worker != nullptr) worker->worker->stop();
}

uint32_t batchd_worker_concurrency(const batchd_worker* worker) {
  return worker == nullptr ? 0 : worker->worker->concurrency();
}

void batchd_worker_close(batchd_worker* worker) { delete worker; }

}  // extern "C"
