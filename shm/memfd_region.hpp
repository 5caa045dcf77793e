// Anonymous shared memory for one client: a memfd, sealed against resizing, mapped through
// Boost.Interprocess's mapped_region.
#pragma once

#include <boost/interprocess/mapped_region.hpp>

#include <cstdint>

#include "shm/fd.hpp"

namespace batchd::shm {

// Creates a memfd of `bytes` zero bytes that can be sealed later. Throws std::system_error.
UniqueFd create_memfd(const char* name, std::uint64_t bytes);

// Seals a memfd's size. With `readers_only`, also refuses any new writable mapping, so a peer
// that receives it can map it only read-only while the creator's existing mapping stays
// writable. Throws std::system_error.
void seal_memfd(int fd, bool readers_only);

// The size of the file behind fd, or -errno.
std::int64_t file_bytes(int fd) noexcept;

// Maps bytes of fd from offset 0, shared. Throws boost::interprocess::interprocess_exception.
boost::interprocess::mapped_region map_fd(int fd, std::uint64_t bytes, bool writable);

}  // namespace batchd::shm
