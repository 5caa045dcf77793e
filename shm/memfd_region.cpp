#include "shm/memfd_region.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>

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

Expected<UniqueFd> create_memfd(const char* name, std::uint64_t bytes) noexcept {
  UniqueFd fd(::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return errno_failure("memfd_create");
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    return errno_failure("ftruncate memfd");
  }
  return fd;
}

Expected<void> seal_memfd(int fd, bool readers_only) noexcept {
  int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
  if (readers_only) seals |= F_SEAL_FUTURE_WRITE;
  if (::fcntl(fd, F_ADD_SEALS, seals) != 0) return errno_failure("seal memfd");
  return {};
}

Expected<std::uint64_t> file_bytes(int fd) noexcept {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errno_failure("fstat");
  return static_cast<std::uint64_t>(st.st_size);
}

Expected<boost::interprocess::mapped_region> map_fd(int fd, std::uint64_t bytes,
                                                     bool writable) noexcept {
  const auto mode = writable ? boost::interprocess::read_write : boost::interprocess::read_only;
  try {
    return boost::interprocess::mapped_region(FdMappable(fd, mode), mode, 0, bytes);
  } catch (const boost::interprocess::interprocess_exception& e) {
    // Its native error is the failed call's errno; 0 when Boost refused the request itself.
    const int err = e.get_native_error();
    return err != 0 ? errno_failure("mmap", err) : errno_failure(e.what(), EINVAL);
  }
}

}  // namespace batchd::shm
