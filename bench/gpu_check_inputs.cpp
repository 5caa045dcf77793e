// gpu_check's inputs: random strings made from a seed, so that a run can be repeated input for
// input, and the lengths where SHA-256's padding changes shape.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "bench/gpu_check.hpp"

namespace batchd::gpu_check {

void append_input(Rng& rng, std::size_t length, FlatBatch& batch) {
  static constexpr const char* kUtf8[] = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
                                          "\xd0\x96"};
  static constexpr std::size_t kUtf8Bytes[] = {2, 3, 4, 2};
  const std::size_t end = batch.bytes.size() + length;
  while (batch.bytes.size() < end) {
    const std::uint64_t r = rng.next();
    const std::size_t pick = r % 16, which = (r >> 8) % 4;
    if (pick < 3 && batch.bytes.size() + kUtf8Bytes[which] <= end) {
      batch.bytes.insert(batch.bytes.end(), kUtf8[which], kUtf8[which] + kUtf8Bytes[which]);
    } else if (pick == 3) {
      batch.bytes.push_back(static_cast<char>(r >> 16));
    } else {
      batch.bytes.push_back(static_cast<char>(' ' + (r >> 16) % 95));
    }
  }
  batch.offsets.push_back(static_cast<std::uint32_t>(batch.bytes.size()));
}

void fill_batch(Rng& rng, std::size_t count, std::uint32_t min_length, std::uint32_t max_length,
                FlatBatch& batch) {
  batch.bytes.clear();
  batch.offsets.assign(1, 0);
  for (std::size_t i = 0; i < count; ++i) {
    append_input(rng, min_length + rng.next() % (max_length - min_length + 1), batch);
  }
}

// For each block boundary 64k: the last length whose padding fits its final block (64k - 9), the
// first that spills into another (64k - 8), and the lengths just below, at and above the
// boundary; plus the empty input and max_bytes itself. Packed into batches of at most
// kMaxBatchBytes bytes.
std::vector<std::vector<std::uint32_t>> boundary_batches(std::uint32_t max_bytes) {
  std::vector<std::uint32_t> lengths{0, 1, max_bytes};
  for (std::uint64_t edge = 64; edge <= max_bytes + std::uint64_t{1}; edge += 64) {
    for (const std::uint64_t length : {edge - 9, edge - 8, edge - 1, edge, edge + 1}) {
      if (length <= max_bytes) lengths.push_back(static_cast<std::uint32_t>(length));
    }
  }
  std::sort(lengths.begin(), lengths.end());
  lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
  std::vector<std::vector<std::uint32_t>> batches(1);
  std::uint64_t bytes = 0;
  for (const std::uint32_t length : lengths) {
    if (bytes + length > kMaxBatchBytes || batches.back().size() == kMaxBatchInputs) {
      batches.emplace_back();
      bytes = 0;
    }
    batches.back().push_back(length);
    bytes += length;
  }
  return batches;
}

}  // namespace batchd::gpu_check
