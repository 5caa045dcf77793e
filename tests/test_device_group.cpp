// Devices shared by several models' lanes (daemon/device_group.hpp): a device runs at most its
// streams' batches at once, the model with the least run time goes first, a model leaves a slot
// to each other active model, a run past its hang timeout stops holding its slot, and a stopping
// router's lanes stop waiting.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "daemon/device_group.hpp"
#include "tests/helpers.hpp"

using namespace batchd;
using namespace std::chrono_literals;

namespace {

constexpr std::int64_t kNoStale = 3'600'000'000'000;  // an hour: never stale in a test

// A lane waiting for its turn on another thread.
struct PendingTurn {
  std::atomic<bool> got{false};
  DeviceGroup::Ticket ticket;
  std::thread thread;

  PendingTurn(DeviceGroup& group, DeviceGroup::MemberId member, unsigned device, const std::atomic<bool>& cancel,
              std::int64_t stale_after_ns = kNoStale) {
    thread = std::thread([&, member, device, stale_after_ns] {
      ticket = group.acquire(member, device, 1'000'000, stale_after_ns, cancel);
      got.store(true, std::memory_order_release);
    });
  }
  ~PendingTurn() {
    if (thread.joinable()) thread.join();
  }
  [[nodiscard]] bool taken() const { return got.load(std::memory_order_acquire); }
  DeviceGroup::Ticket wait() {
    thread.join();
    return ticket;
  }
};

}  // namespace

TEST_CASE("a device runs one batch per stream at once, whichever models hold it") {
  DeviceGroup group("sim", 1);
  const std::atomic<bool> no_cancel{false};
  const auto a = group.join({0});
  const auto b = group.join({0});
  const DeviceGroup::Ticket held = group.acquire(a, 0, 50'000'000, kNoStale, no_cancel);
  REQUIRE(held.slot == 0);
  CHECK(group.wait_ns(0, held.started_ns) > 0);  // the holder's predicted run is still to come
  PendingTurn turn(group, b, 0, no_cancel);
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(turn.taken());
  group.release(a, held);
  const DeviceGroup::Ticket next = turn.wait();
  CHECK(next.slot == 0);
  CHECK(next.waited_ns >= 40'000'000);
  group.release(b, next);
  CHECK(group.wait_ns(0, next.started_ns) == 0);
}

TEST_CASE("the model with the least run time goes first, whoever asked first") {
  DeviceGroup group("sim", 1);
  const std::atomic<bool> no_cancel{false};
  const auto a = group.join({0});
  const auto b = group.join({0});
  const auto c = group.join({0});
  // a has had 30 ms of the device; b nothing yet.
  DeviceGroup::Ticket t = group.acquire(a, 0, 0, kNoStale, no_cancel);
  std::this_thread::sleep_for(30ms);
  group.release(a, t);
  // While c holds the device, a asks, then b. Each asker's thread is given 200 ms to be waiting
  // before the next step: 20 ms was not enough for b's in an ASan run beside two compiles (a got
  // the turn, b not yet asking).
  const DeviceGroup::Ticket c_turn = group.acquire(c, 0, 0, kNoStale, no_cancel);
  PendingTurn a_turn(group, a, 0, no_cancel);
  std::this_thread::sleep_for(200ms);
  PendingTurn b_turn(group, b, 0, no_cancel);
  std::this_thread::sleep_for(200ms);
  group.release(c, c_turn);
  REQUIRE(test::eventually([&] { return a_turn.taken() || b_turn.taken(); }, 5s));
  CHECK(b_turn.taken());
  CHECK_FALSE(a_turn.taken());
  group.release(b, b_turn.wait());
  group.release(a, a_turn.wait());
}

TEST_CASE("while another model is active a model leaves it a slot; alone it may hold them all") {
  DeviceGroup group("sim", 1);
  const std::atomic<bool> no_cancel{false};
  const auto a = group.join({0, 1});
  const auto b = group.join({0, 1});
  // b is active (it ran a batch just now): a holds one device, not both.
  group.release(b, group.acquire(b, 1, 0, kNoStale, no_cancel));
  const DeviceGroup::Ticket first = group.acquire(a, 0, 0, kNoStale, no_cancel);
  PendingTurn second(group, a, 1, no_cancel);
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(second.taken());
  // b's request finds device 1 free at once, and says so before it asks.
  CHECK(group.wait_ns(1, first.started_ns) == 0);
  const DeviceGroup::Ticket b_turn = group.acquire(b, 1, 0, kNoStale, no_cancel);
  CHECK(b_turn.slot == 0);
  CHECK(b_turn.waited_ns == 0);
  group.release(b, b_turn);
  // Once b has left, a has both devices.
  group.leave(b);
  const DeviceGroup::Ticket both = second.wait();
  CHECK(both.slot == 0);
  group.release(a, first);
  group.release(a, both);
}

TEST_CASE("a run past its hang timeout no longer holds its slot") {
  DeviceGroup group("sim", 1);
  const std::atomic<bool> no_cancel{false};
  const auto a = group.join({0});
  const auto b = group.join({0});
  const DeviceGroup::Ticket hung = group.acquire(a, 0, 0, 50'000'000, no_cancel);
  PendingTurn turn(group, b, 0, no_cancel);
  const DeviceGroup::Ticket b_turn = turn.wait();  // after the 50 ms, not the hour
  CHECK(b_turn.slot == 0);
  CHECK(b_turn.waited_ns >= 40'000'000);
  // The hung run returns at last: its release leaves b's turn alone.
  group.release(a, hung);
  PendingTurn after(group, a, 0, no_cancel);
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(after.taken());
  group.release(b, b_turn);
  CHECK(after.wait().slot == 0);
  group.release(a, after.ticket);
}

TEST_CASE("a stopping router's lane stops waiting and runs without a turn") {
  DeviceGroup group("cuda", 2);
  const std::atomic<bool> no_cancel{false};
  std::atomic<bool> cancel{false};
  const auto a = group.join({0});
  const auto b = group.join({0});
  const DeviceGroup::Ticket one = group.acquire(a, 0, 0, kNoStale, no_cancel);
  const DeviceGroup::Ticket two = group.acquire(a, 0, 0, kNoStale, no_cancel);  // b is not active yet
  CHECK(one.slot != two.slot);
  PendingTurn turn(group, b, 0, cancel);
  std::this_thread::sleep_for(30ms);
  CHECK_FALSE(turn.taken());
  cancel.store(true, std::memory_order_release);
  group.wake_all();
  CHECK(turn.wait().slot < 0);
  group.release(a, one);
  group.release(a, two);
}

TEST_CASE("devices past the group's range, or asked for after a cancel, need no turn") {
  DeviceGroup group("sim", 1);
  std::atomic<bool> cancel{true};
  const auto a = group.join({0, DeviceGroup::kMaxDevices});
  CHECK(group.acquire(a, DeviceGroup::kMaxDevices, 0, kNoStale, cancel).slot < 0);
  CHECK(group.acquire(a, 0, 0, kNoStale, cancel).slot < 0);
  CHECK(group.wait_ns(DeviceGroup::kMaxDevices, 0) == 0);
}
