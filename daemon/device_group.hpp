// Devices that several in-process models run on: each model has a backend and a router of its
// own (model_pipeline.hpp), but the sim's simulated GPUs, or CUDA's real ones, are one set of
// devices under all of them. Here the models' lanes take turns on them:
// - a device runs at most `streams` batches at once, whichever models they are of;
// - when lanes of several models wait for a device, the model that has had the least run time on
//   the group goes first (fair queueing by cost: a model of costly batches gets fewer of them);
// - while other models are active (a batch waiting or running, or one within kActiveWindowNs), a
//   model holds at most every slot but one per other active model (and always one): a flood on one
//   model never holds every device while another model's requests wait for one.
// A run past its holder's hang timeout no longer holds its slot (its router runs a copy elsewhere,
// and other models must not wait for it either). Lane threads wait here; the drain thread only
// reads atomics (wait_ns).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace batchd {

class DeviceGroup {
 public:
  // Devices past this are not shared (the router's device bitsets stop there too).
  static constexpr unsigned kMaxDevices = 64;
  // A model that ran nothing for this long is idle: it reserves no slot, and banks no turns.
  static constexpr std::int64_t kActiveWindowNs = 1'000'000'000;

  // `streams`: how many batches one device runs at once.
  DeviceGroup(std::string name, unsigned streams);
  DeviceGroup(const DeviceGroup&) = delete;
  DeviceGroup& operator=(const DeviceGroup&) = delete;

  using MemberId = std::uint32_t;
  // A model's router joins with the group places of its devices; it leaves when its lanes are
  // stopped (nothing of it holds or waits).
  MemberId join(const std::vector<unsigned>& devices);
  void leave(MemberId member) noexcept;

  // A slot taken; release() gives it back. `slot` < 0: run without one (outside the group, or
  // the wait was cancelled).
  struct Ticket {
    unsigned device = 0;
    int slot = -1;
    std::uint64_t token = 0;
    std::int64_t started_ns = 0;
    std::int64_t waited_ns = 0;  // 0: the turn came at once
  };
  // A lane of `member` is to run a batch on `device`, expected to take predicted_ns; waits for its
  // turn. `stale_after_ns`: the holder's hang timeout (after it the slot is free to others).
  // Returns at once, without a slot, once `cancel` is set (the router stops; wake_all()).
  Ticket acquire(MemberId member, unsigned device, std::int64_t predicted_ns, std::int64_t stale_after_ns,
                 const std::atomic<bool>& cancel);
  // The run is over: its time is charged to the member, and the slot goes to the next in turn.
  void release(MemberId member, const Ticket& ticket) noexcept;
  // Waiters look at their cancel flags now.
  void wake_all() noexcept;

  // How long until a lane could start on `device` as the holders' predictions have it: 0 when a
  // slot is free (or not held past its prediction). Any thread; reads atomics only.
  [[nodiscard]] std::int64_t wait_ns(unsigned device, std::int64_t now_ns) const noexcept;

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] unsigned streams() const noexcept { return streams_; }

 private:
  struct Slot {
    std::atomic<std::uint32_t> holder{0};  // member + 1; 0: free
    std::atomic<std::int64_t> until_ns{0};  // predicted end of the run
    std::int64_t stale_ns = 0;              // guarded by mu_: after it, the slot counts as free
    std::uint64_t token = 0;                // guarded by mu_: whose release frees it
  };
  struct Member {
    bool joined = false;
    std::vector<unsigned> devices;
    double served_ns = 0;          // run time had, as the turn order counts it
    std::int64_t active_ns = 0;    // last wait or release
    unsigned holding = 0;
    unsigned waiting = 0;
  };
  struct Waiter {
    MemberId member;
    unsigned device;
    std::uint64_t seq;
  };

  // A waiter looks again at least this often: a cap loosens when another model's activity window
  // ends, which nothing signals.
  static constexpr std::int64_t kRecheckNs = 100'000'000;

  // Everything below is called with mu_ held.
  [[nodiscard]] Slot* free_slot(unsigned device, std::int64_t now_ns) noexcept;
  // Slots a member may hold now: all but one per other active member, and at least one.
  [[nodiscard]] unsigned cap(MemberId member, std::int64_t now_ns) const noexcept;
  [[nodiscard]] bool active(const Member& m, std::int64_t now_ns) const noexcept;
  // Whether this waiter is next for its device: a slot free, its member under its cap, and no
  // such waiter there of a member with less run time (or of its own, waiting longer).
  [[nodiscard]] bool next_in_turn(const Waiter& me, std::int64_t now_ns) noexcept;
  // A member that comes back after being idle starts level with the busy ones (no banked turns).
  void catch_up(Member& m) noexcept;
  // The earliest a held slot of `device` goes stale (when a waiter must look again).
  [[nodiscard]] std::int64_t next_stale_ns(unsigned device) const noexcept;
  [[nodiscard]] unsigned total_slots() const noexcept { return shared_devices_ * streams_; }

  const std::string name_;
  const unsigned streams_;
  std::unique_ptr<Slot[]> slots_;  // kMaxDevices x streams_, device-major
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Member>> members_;  // by MemberId; reused once left
  std::vector<unsigned> device_members_;          // by device: members that run there
  unsigned shared_devices_ = 0;                   // devices some member runs on
  std::vector<Waiter> waiters_;
  std::uint64_t next_seq_ = 1;
  std::uint64_t next_token_ = 1;
};

// The daemon's device groups, by name (Backend::device_group()): the first backend to name one
// makes it, with its streams per device.
class DeviceGroups {
 public:
  std::shared_ptr<DeviceGroup> get(std::string_view name, unsigned streams);

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<DeviceGroup>, std::less<>> groups_;
};

}  // namespace batchd
