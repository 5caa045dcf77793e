// moodycamel's queues order their hand-offs with fences, which TSan does not model; these tell
// TSan about the happens-before edge each queue hand-off really provides. No-ops otherwise.
#pragma once

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace batchd {

inline void handoff_release([[maybe_unused]] void* object) noexcept {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(object);
#endif
}

inline void handoff_acquire([[maybe_unused]] void* object) noexcept {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(object);
#endif
}

}  // namespace batchd
