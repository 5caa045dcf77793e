#include "daemon/dead_letter_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace batchd {

Expected<DeadLetterFile> DeadLetterFile::open(std::string path, std::uint64_t max_bytes) noexcept {
  if (max_bytes == 0) {
    return make_failure(std::errc::invalid_argument, "the dead-letter file's size bound must be more than 0");
  }
  DeadLetterFile file(std::move(path), max_bytes);
  if (auto opened = file.reopen(false); !opened) return opened.error();
  return file;
}

Expected<void> DeadLetterFile::reopen(bool truncate) noexcept {
  const int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (truncate ? O_TRUNC : 0);
  shm::UniqueFd fd(::open(path_.c_str(), flags, 0640));
  if (!fd.valid()) return errno_failure("cannot open dead-letter file " + path_);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno_failure("fstat " + path_);
  fd_ = std::move(fd);
  bytes_ = static_cast<std::uint64_t>(st.st_size);
  return {};
}

Expected<void> DeadLetterFile::rotate() noexcept {
  const std::string previous = path_ + ".1";
  ++rotations_;
  if (::rename(path_.c_str(), previous.c_str()) != 0) {
    // The bound matters more than the old records: start the file over.
    spdlog::warn("cannot rotate the dead-letter file {} to {} ({}): starting it over", path_, previous,
                 std::strerror(errno));
    return reopen(true);
  }
  return reopen(false);
}

Expected<void> DeadLetterFile::append(std::string_view line) noexcept {
  if (bytes_ > 0 && bytes_ + line.size() > max_bytes_) {
    // No new file could be opened: the line is refused (the log counts it as dropped).
    if (auto rotated = rotate(); !rotated) return rotated.error();
  }
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_.get(), line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return errno_failure("cannot write dead-letter file " + path_, n == 0 ? ENOSPC : errno);
    done += static_cast<std::size_t>(n);
    bytes_ += static_cast<std::uint64_t>(n);
  }
  return {};
}

}  // namespace batchd
