// Model control on the daemon's control socket (batchctl load/unload, the front-ends' repository
// routes): a ModelControlHello names a model and what to do with it; the daemon answers with an
// AttachReply (no fds) whose message says what it did, and the connection then closes. The
// change itself runs on the daemon's drain loop and shows in the status page's models table
// (StatusModelState): an unload stops admitting at once and completes once what the model holds
// is answered; a load completes once its backend is made.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "shm/attach_protocol.hpp"
#include "shm/worker_region.hpp"

namespace batchd::shm {

// Hello::flags of a model-control hello (a ModelControlHello, not a Hello).
inline constexpr std::uint32_t kHelloModelControl = 3;

enum class ModelAction : std::uint32_t { kLoad = 1, kUnload = 2 };

inline constexpr std::size_t kModelControlNameBytes = 64;  // a name of up to 63 bytes, NUL-padded

struct ModelControlHello {
  Hello hello;  // magic, protocol_version, flags == kHelloModelControl, reserved 0
  ModelAction action;
  std::uint32_t reserved;  // 0
  char model[kModelControlNameBytes];
};
static_assert(std::is_standard_layout_v<ModelControlHello> && sizeof(ModelControlHello) == 88);
// The daemon reads every hello into a WorkerHello, the largest.
static_assert(sizeof(ModelControlHello) <= sizeof(WorkerHello));

}  // namespace batchd::shm
