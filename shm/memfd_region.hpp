// Anonymous shared memory for one client: a memfd, sealed against resizing, mapped through
// Boost.Interprocess's mapped_region.
#pragma once

#include <boost/interprocess/mapped_region.hpp>

#include <cstdint>

#include "base/expected.hpp"
#include "shm/fd.hpp"

namespace batchd::shm {

// Creates a memfd of `bytes` zero bytes that can be sealed later.
Expected<UniqueFd> create_memfd(const char* name, std::uint64_t bytes) noexcept;

// Seals a memfd's size. With `readers_only`, also refuses any new writable mapping, so a peer
// that receives it can map it only read-only while the creator's existing mapping stays
// writable.
Expected<void> seal_memfd(int fd, bool readers_only) noexcept;

// The size of the file behind fd.
Expected<std::uint64_t> file_bytes(int fd) noexcept;

// Maps bytes of fd from offset 0, shared. Boost.Interprocess's exception becomes the failure.
Expected<boost::interprocess::mapped_region> map_fd(int fd, std::uint64_t bytes,
                                                     bool writable) noexcept;

}  // namespace batchd::shm
