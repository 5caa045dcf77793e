// Request inputs: a pool of random valid-UTF-8 bodies generated up front, each request stamped
// with its id so two requests in flight never carry the same bytes and a cross-wired answer
// shows up as a wrong one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace batchd::stress {

class InputPool {
 public:
  // Bodies have lengths drawn uniformly from [min_bytes, max_bytes]; the same seed gives the
  // same input for the same request id.
  InputPool(std::uint32_t min_bytes, std::uint32_t max_bytes, std::uint64_t seed);
  // Replays these inputs verbatim, in turn (--input-file). They carry no id, so a cross-wired
  // answer shows only where the two inputs differ: real inputs are rarely all alike.
  explicit InputPool(std::vector<std::string> replay);

  // Writes request `id`'s input into `out`. Allocates nothing once out has capacity max_bytes().
  void build(std::uint64_t id, std::string& out) const;

  [[nodiscard]] std::uint32_t max_bytes() const noexcept { return max_bytes_; }

 private:
  std::vector<std::string> bodies_;
  std::uint32_t max_bytes_;
  bool verbatim_ = false;
};

}  // namespace batchd::stress
