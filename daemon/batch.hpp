// A batch as it travels from the drain loop to a backend lane and on to the completer. Batch
// objects are pooled and cleared, never freed, so their buffers keep their capacity.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "daemon/backend.hpp"
#include "daemon/client_session.hpp"

namespace batchd {

// Where one request's answer goes.
struct RequestRef {
  std::shared_ptr<ClientSession> session;  // keeps the segment mapped until the answer is written
  std::uint32_t slot = 0;
  std::uint32_t generation = 0;
  std::int64_t deadline_mono_ns = 0;
};

struct Batch {
  std::uint64_t id = 0;
  std::int64_t opened_ns = 0;         // arrival of its oldest request
  std::vector<char> input_bytes;      // private copies of the inputs, back to back
  std::vector<std::uint32_t> input_offsets{0};
  std::vector<RequestRef> requests;
  BatchOutput output;

  [[nodiscard]] BatchInput input() const noexcept { return {input_bytes, input_offsets}; }
  [[nodiscard]] std::size_t size() const noexcept { return requests.size(); }

  void clear() noexcept {
    input_bytes.clear();
    input_offsets.assign(1, 0);
    requests.clear();  // drops the session references
    output.clear();
  }
};

}  // namespace batchd
