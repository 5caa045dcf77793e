#include "daemon/device_group.hpp"

#include <algorithm>
#include <chrono>
#include <limits>

#include "shm/clock.hpp"

namespace batchd {

DeviceGroup::DeviceGroup(std::string name, unsigned streams)
    : name_(std::move(name)),
      streams_(std::max(1U, streams)),
      slots_(std::make_unique<Slot[]>(std::size_t{kMaxDevices} * streams_)),
      device_members_(kMaxDevices, 0) {}

DeviceGroup::MemberId DeviceGroup::join(const std::vector<unsigned>& devices) {
  std::lock_guard lock(mu_);
  MemberId id = 0;
  while (id < members_.size() && members_[id]->joined) ++id;
  if (id == members_.size()) members_.push_back(std::make_unique<Member>());
  Member& m = *members_[id];
  m.joined = true;
  m.devices.clear();
  m.served_ns = 0;
  m.active_ns = 0;
  m.holding = 0;
  m.waiting = 0;
  for (const unsigned d : devices) {
    if (d >= kMaxDevices) continue;
    m.devices.push_back(d);
    if (device_members_[d]++ == 0) ++shared_devices_;
  }
  return id;
}

void DeviceGroup::leave(MemberId member) noexcept {
  {
    std::lock_guard lock(mu_);
    Member& m = *members_[member];
    for (const unsigned d : m.devices) {
      if (--device_members_[d] == 0) --shared_devices_;
    }
    m.devices.clear();
    m.joined = false;
  }
  cv_.notify_all();  // the caps of those left loosen
}

DeviceGroup::Ticket DeviceGroup::acquire(MemberId member, unsigned device, std::int64_t predicted_ns,
                                         std::int64_t stale_after_ns, const std::atomic<bool>& cancel) {
  Ticket ticket;
  ticket.device = device;
  if (device >= kMaxDevices || cancel.load(std::memory_order_acquire)) return ticket;
  std::unique_lock lock(mu_);
  Member& m = *members_[member];
  const std::int64_t asked_ns = shm::monotonic_ns();
  if (m.holding == 0 && m.waiting == 0) catch_up(m);
  ++m.waiting;
  m.active_ns = asked_ns;
  const Waiter me{member, device, next_seq_++};
  waiters_.push_back(me);
  std::int64_t now_ns = asked_ns;
  bool waited = false;
  for (;;) {
    if (cancel.load(std::memory_order_acquire)) break;
    if (next_in_turn(me, now_ns)) {
      Slot* slot = free_slot(device, now_ns);
      if (const std::uint32_t stale = slot->holder.load(std::memory_order_relaxed); stale != 0) {
        --members_[stale - 1]->holding;  // its release, when the run returns, finds the token changed
      }
      slot->holder.store(member + 1, std::memory_order_relaxed);
      slot->until_ns.store(now_ns + std::max<std::int64_t>(predicted_ns, 0), std::memory_order_relaxed);
      slot->stale_ns = now_ns + stale_after_ns;
      slot->token = next_token_++;
      ++m.holding;
      ticket.slot = static_cast<int>(slot - &slots_[std::size_t{device} * streams_]);
      ticket.token = slot->token;
      ticket.started_ns = now_ns;
      break;
    }
    waited = true;
    // A slot gone stale that is still not ours (a turn or a cap ahead) is no reason to look sooner.
    const std::int64_t stale_ns = next_stale_ns(device);
    const std::int64_t recheck_ns = stale_ns > now_ns ? std::min(stale_ns, now_ns + kRecheckNs) : now_ns + kRecheckNs;
    cv_.wait_for(lock, std::chrono::nanoseconds(std::max<std::int64_t>(recheck_ns - now_ns, 1)));
    now_ns = shm::monotonic_ns();
  }
  waiters_.erase(std::find_if(waiters_.begin(), waiters_.end(), [&](const Waiter& w) { return w.seq == me.seq; }));
  --m.waiting;
  if (waited) ticket.waited_ns = std::max<std::int64_t>(now_ns - asked_ns, 1);
  const bool others_wait = !waiters_.empty();
  lock.unlock();
  // Another waiter may be next now: a second free slot of this device, or one that waited behind
  // this (cancelled) one.
  if (others_wait) cv_.notify_all();
  return ticket;
}

void DeviceGroup::release(MemberId member, const Ticket& ticket) noexcept {
  if (ticket.slot < 0) return;
  const std::int64_t now_ns = shm::monotonic_ns();
  {
    std::lock_guard lock(mu_);
    Member& m = *members_[member];
    m.served_ns += static_cast<double>(now_ns - ticket.started_ns);
    m.active_ns = now_ns;
    Slot& slot = slots_[std::size_t{ticket.device} * streams_ + static_cast<std::size_t>(ticket.slot)];
    if (slot.token == ticket.token) {
      slot.holder.store(0, std::memory_order_relaxed);
      slot.until_ns.store(0, std::memory_order_relaxed);
      slot.token = 0;
      --m.holding;
    }
  }
  cv_.notify_all();
}

void DeviceGroup::wake_all() noexcept {
  { std::lock_guard lock(mu_); }  // a waiter between its cancel check and its wait sees the flag after
  cv_.notify_all();
}

std::int64_t DeviceGroup::wait_ns(unsigned device, std::int64_t now_ns) const noexcept {
  if (device >= kMaxDevices) return 0;
  std::int64_t soonest = std::numeric_limits<std::int64_t>::max();
  for (unsigned s = 0; s < streams_; ++s) {
    const Slot& slot = slots_[std::size_t{device} * streams_ + s];
    if (slot.holder.load(std::memory_order_relaxed) == 0) return 0;
    soonest = std::min(soonest, slot.until_ns.load(std::memory_order_relaxed) - now_ns);
  }
  return std::max<std::int64_t>(soonest, 0);
}

DeviceGroup::Slot* DeviceGroup::free_slot(unsigned device, std::int64_t now_ns) noexcept {
  Slot* stale = nullptr;
  for (unsigned s = 0; s < streams_; ++s) {
    Slot& slot = slots_[std::size_t{device} * streams_ + s];
    if (slot.holder.load(std::memory_order_relaxed) == 0) return &slot;
    if (stale == nullptr && now_ns >= slot.stale_ns) stale = &slot;
  }
  return stale;
}

bool DeviceGroup::active(const Member& m, std::int64_t now_ns) const noexcept {
  return m.joined && (m.holding != 0 || m.waiting != 0 || now_ns - m.active_ns < kActiveWindowNs);
}

unsigned DeviceGroup::cap(MemberId member, std::int64_t now_ns) const noexcept {
  unsigned others = 0;
  for (MemberId id = 0; id < members_.size(); ++id) {
    if (id != member && active(*members_[id], now_ns)) ++others;
  }
  const unsigned total = total_slots();
  return total > others + 1 ? total - others : 1;
}

bool DeviceGroup::next_in_turn(const Waiter& me, std::int64_t now_ns) noexcept {
  if (free_slot(me.device, now_ns) == nullptr) return false;
  const Member& mine = *members_[me.member];
  if (mine.holding >= cap(me.member, now_ns)) return false;
  for (const Waiter& w : waiters_) {
    if (w.device != me.device || w.seq == me.seq) continue;
    if (w.member == me.member) {
      if (w.seq < me.seq) return false;
      continue;
    }
    const Member& other = *members_[w.member];
    if (other.holding >= cap(w.member, now_ns)) continue;
    if (other.served_ns < mine.served_ns || (other.served_ns == mine.served_ns && w.seq < me.seq)) return false;
  }
  return true;
}

void DeviceGroup::catch_up(Member& m) noexcept {
  double busiest_least = std::numeric_limits<double>::max();
  for (const auto& other : members_) {
    if (other.get() == &m || !other->joined || (other->holding == 0 && other->waiting == 0)) continue;
    busiest_least = std::min(busiest_least, other->served_ns);
  }
  if (busiest_least != std::numeric_limits<double>::max()) m.served_ns = std::max(m.served_ns, busiest_least);
}

std::int64_t DeviceGroup::next_stale_ns(unsigned device) const noexcept {
  std::int64_t soonest = std::numeric_limits<std::int64_t>::max();
  for (unsigned s = 0; s < streams_; ++s) {
    const Slot& slot = slots_[std::size_t{device} * streams_ + s];
    if (slot.holder.load(std::memory_order_relaxed) != 0) soonest = std::min(soonest, slot.stale_ns);
  }
  return soonest;
}

std::shared_ptr<DeviceGroup> DeviceGroups::get(std::string_view name, unsigned streams) {
  std::lock_guard lock(mu_);
  auto it = groups_.find(name);
  if (it == groups_.end()) it = groups_.emplace(std::string(name), std::make_shared<DeviceGroup>(std::string(name), streams)).first;
  return it->second;
}

}  // namespace batchd
