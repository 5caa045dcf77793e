#include "shm/memfd_region.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <system_error>

namespace batchd::shm {
namespace {

// mapped_region maps anything that can name its handle and mode; a memfd is a plain fd.
class FdMappable {
 public:
  FdMappable(int fd, boost::interprocess::mode_t mode) : fd_(fd), mode_(mode) {}
  [[nodiscard]] boost::interprocess::mapping_handle_t get_mapping_handle() const noexcept {
    return boost::interprocess::ipcdetail::mapping_handle_from_file_handle(fd_);
  }
  [[nodiscard]] boost::interprocess::mode_t get_mode() const noexcept { return mode_; }

 private:
  int fd_;
  boost::interprocess::mode_t mode_;
};

}  // namespace

UniqueFd create_memfd(const char* name, std::uint64_t bytes) {
  UniqueFd fd(::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) throw std::system_error(errno, std::generic_category(), "memfd_create");
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    throw std::system_error(errno, std::generic_category(), "ftruncate memfd");
  }
  return fd;
}

void seal_memfd(int fd, bool readers_only) {
  int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
  if (readers_only) seals |= F_SEAL_FUTURE_WRITE;
  if (::fcntl(fd, F_ADD_SEALS, seals) != 0) {
    throw std::system_error(errno, std::generic_category(), "seal memfd");
  }
}

std::int64_t file_bytes(int fd) noexcept {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return -errno;
  return st.st_size;
}

boost::interprocess::mapped_region map_fd(int fd, std::uint64_t bytes, bool writable) {
  const auto mode = writable ? boost::interprocess::read_write : boost::interprocess::read_only;
  return boost::interprocess::mapped_region(FdMappable(fd, mode), mode, 0, bytes);
}

}  // namespace batchd::shm
