// The dead-letter log's file: whole lines appended to a file that is rotated by size, so it and
// its one predecessor (path.1) hold at most about twice the bound. Used by one thread at a time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/expected.hpp"
#include "shm/fd.hpp"

namespace batchd {

class DeadLetterFile {
 public:
  // Opens path for appending (creating it, mode 0640 before the umask); EINVAL if max_bytes is 0.
  static Expected<DeadLetterFile> open(std::string path, std::uint64_t max_bytes) noexcept;

  // Appends one line (it ends in '\n'). A line that would take a non-empty file past max_bytes
  // first rotates it: path becomes path.1 (replacing the last one) and a new path begins, so a
  // single line longer than the bound still lands whole, alone in its file.
  Expected<void> append(std::string_view line) noexcept;

  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] std::uint64_t bytes() const noexcept { return bytes_; }
  [[nodiscard]] std::uint64_t rotations() const noexcept { return rotations_; }

 private:
  DeadLetterFile(std::string path, std::uint64_t max_bytes) noexcept
      : path_(std::move(path)), max_bytes_(max_bytes) {}
  Expected<void> reopen(bool truncate) noexcept;
  Expected<void> rotate() noexcept;

  std::string path_;
  std::uint64_t max_bytes_;
  shm::UniqueFd fd_;
  std::uint64_t bytes_ = 0;      // the file's size as this process wrote it
  std::uint64_t rotations_ = 0;
};

}  // namespace batchd
