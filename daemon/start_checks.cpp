#include "daemon/start_checks.hpp"

#include <chrono>
#include <stdexcept>
#include <string>

#include "daemon/client_session.hpp"
#include "daemon/batcher.hpp"
#include "daemon/fd_limit.hpp"
#include "daemon/model_pipeline.hpp"
#include "shm/layout.hpp"

namespace batchd {

void check_can_start(const DaemonConfig& config, const ModelRegistry& models, unsigned max_attaching) {
  if (auto usable = shm::check_params(config.segment); !usable) {
    throw std::invalid_argument("bad segment parameters: " + usable.error().message);
  }
  for (const auto& model : models) {
    const BatchLimits& batch = model->limits();
    const std::string of = models.size() > 1 ? " (model " + model->config().name + ")" : "";
    if (batch.max_batch == 0) throw std::invalid_argument("max batch must be at least 1" + of);
    if (batch.max_batch_bytes > kMaxBatchBytes) {
      // Backends address a batch's inputs with 32-bit offsets.
      throw std::invalid_argument("--max-batch-bytes (" + std::to_string(batch.max_batch_bytes) +
                                  ") must not exceed " + std::to_string(kMaxBatchBytes) + of);
    }
    if (config.segment.max_input_bytes > batch.max_batch_bytes) {
      // A batch holds at least one input, and backends size their buffers by the byte budget.
      throw std::invalid_argument("--max-input-bytes (" + std::to_string(config.segment.max_input_bytes) +
                                  ") must not exceed --max-batch-bytes (" + std::to_string(batch.max_batch_bytes) +
                                  ")" + of);
    }
  }
  // steady_clock is CLOCK_MONOTONIC on Linux: the clock of every deadline in shared memory.
  static_assert(std::chrono::steady_clock::is_steady);
  if (!doorbell_reads_never_block()) {
    throw std::runtime_error("this kernel cannot read an eventfd with RWF_NOWAIT (Linux 5.12 or "
                             "later is needed): a client could block the daemon through its doorbell");
  }
  const std::uint64_t fd_limit = raise_fd_limit();
  if (const std::uint64_t needed = fds_needed(config.max_clients, max_attaching); fd_limit < needed) {
    throw std::invalid_argument(
        "--max-clients " + std::to_string(config.max_clients) + " needs about " +
        std::to_string(needed) + " open files, but the limit is " + std::to_string(fd_limit) +
        " (raise it with ulimit -n or LimitNOFILE=, or lower --max-clients)");
  }
}

}  // namespace batchd
