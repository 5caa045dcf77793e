// The reference backend on CPU threads: iterated SHA-256, lowercase hex.
#pragma once

#include "backend/backend.hpp"

namespace batchd {

class CpuBackend final : public Backend {
 public:
  // Preconditions: cost >= 1, threads >= 1.
  CpuBackend(unsigned cost, unsigned threads) noexcept : cost_(cost), threads_(threads) {}

  [[nodiscard]] std::string_view name() const noexcept override { return "cpu"; }
  // Each worker thread is a device of one stream to the router.
  [[nodiscard]] unsigned devices() const noexcept override { return threads_; }
  // Hashing holds no state and takes no lock.
  [[nodiscard]] bool runs_inline() const noexcept override { return true; }
  BackendStatus run(LaneId lane, const BatchInput& in, BatchOutput& out) override;

 private:
  unsigned cost_;     // SHA-256 rounds per input
  unsigned threads_;  // one device per worker thread
};

}  // namespace batchd
