#include "daemon/coalescer.hpp"

#include "daemon/pending_queue.hpp"

namespace batchd {
namespace {

std::int64_t later(std::int64_t a_ns, std::int64_t b_ns) noexcept {
  return a_ns == 0 || b_ns == 0 ? 0 : std::max(a_ns, b_ns);
}

std::uint64_t token_of(std::uint32_t index, std::uint32_t generation) noexcept {
  return (std::uint64_t{generation} << 32) | index;
}

}  // namespace

bool Coalescer::follow_or_lead(std::uint64_t hash, std::string_view input, RequestRef& request) {
  const std::size_t rank = shm::rank_of(request.priority);
  std::lock_guard lock(mu_);
  if (!table_.empty()) {
    for (std::size_t p = home(hash);; p = (p + 1) & (table_.size() - 1)) {
      const std::uint32_t at = table_[p];
      if (at == kEmpty) break;
      Entry& entry = entries_[at - 1];
      if (entry.hash != hash || entry.input != input) continue;
      entry.latest_deadline_ns = later(entry.latest_deadline_ns, request.deadline_mono_ns);
      if (rank >= entry.best_rank) {  // a leader runs at least as urgently as it would
        entry.followers.push_back(std::move(request));
        return true;
      }
      entry.best_rank = rank;
      entry.leaders += 1;
      request.lead = token_of(at - 1, entry.generation);
      return false;
    }
  }
  if ((live_ + 1) * 2 > table_.size()) grow();
  if (free_.empty()) {
    entries_.emplace_back();
    free_.push_back(static_cast<std::uint32_t>(entries_.size() - 1));
  }
  const std::uint32_t index = free_.back();
  Entry& entry = entries_[index];
  entry.input.assign(input);  // what may throw, before anything changes
  free_.pop_back();
  entry.hash = hash;
  entry.live = true;
  entry.latest_deadline_ns = request.deadline_mono_ns;
  entry.best_rank = rank;
  entry.leaders = 1;
  place(index);
  ++live_;
  request.lead = token_of(index, entry.generation);
  return false;
}

void Coalescer::settle(std::uint64_t token, shm::WireStatus status, std::vector<RequestRef>& out) {
  const bool settled = status == shm::WireStatus::kOk || status == shm::WireStatus::kBackendError;
  std::lock_guard lock(mu_);
  Entry* entry = entry_of(token);
  if (entry == nullptr) return;  // another leader settled it already
  entry->leaders -= 1;
  if (!settled && entry->leaders > 0) return;
  out.reserve(out.size() + entry->followers.size());  // what may throw, before anything moves
  for (RequestRef& follower : entry->followers) out.push_back(std::move(follower));
  entry->followers.clear();
  const auto index = static_cast<std::uint32_t>(token);
  unplace(index);
  entry->live = false;
  entry->generation = entry->generation == UINT32_MAX ? 1 : entry->generation + 1;
  free_.push_back(index);  // within the capacity every entry once reserved: cannot throw
  --live_;
}

std::int64_t Coalescer::expire_ns(std::uint64_t token) const {
  std::lock_guard lock(mu_);
  const Entry* entry = entry_of(token);
  return entry == nullptr ? -1 : entry->latest_deadline_ns;
}

Coalescer::Entry* Coalescer::entry_of(std::uint64_t token) noexcept {
  const auto index = static_cast<std::uint32_t>(token);
  if (index >= entries_.size()) return nullptr;
  Entry& entry = entries_[index];
  return entry.live && entry.generation == static_cast<std::uint32_t>(token >> 32) ? &entry : nullptr;
}

const Coalescer::Entry* Coalescer::entry_of(std::uint64_t token) const noexcept {
  return const_cast<Coalescer*>(this)->entry_of(token);
}

void Coalescer::place(std::uint32_t index) {
  std::size_t p = home(entries_[index].hash);
  while (table_[p] != kEmpty) p = (p + 1) & (table_.size() - 1);
  table_[p] = index + 1;
}

void Coalescer::unplace(std::uint32_t index) noexcept {
  const std::size_t mask = table_.size() - 1;
  std::size_t hole = home(entries_[index].hash);
  while (table_[hole] != index + 1) hole = (hole + 1) & mask;
  // Backward shift: each later entry of the run that may fill the hole moves into it, so a probe
  // never stops early at a hole its own entry was placed past.
  for (std::size_t p = (hole + 1) & mask; table_[p] != kEmpty; p = (p + 1) & mask) {
    const std::size_t want = home(entries_[table_[p] - 1].hash);
    const bool movable = hole <= p ? (want <= hole || want > p) : (want <= hole && want > p);
    if (movable) {
      table_[hole] = table_[p];
      hole = p;
    }
  }
  table_[hole] = kEmpty;
}

void Coalescer::grow() {
  const std::size_t size = table_.empty() ? 64 : table_.size() * 2;
  std::vector<std::uint32_t> bigger(size, kEmpty);
  free_.reserve(size);  // every entry can be free at once: settle's push_back never allocates
  table_.swap(bigger);
  for (std::uint32_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].live) place(i);
  }
}

}  // namespace batchd

namespace batchd {

std::int64_t expire_ns(const RequestRef& request) {
  if (request.lead == 0 || request.coalescer == nullptr) return request.deadline_mono_ns;
  const std::int64_t entry_ns = request.coalescer->expire_ns(request.lead);
  return entry_ns < 0 ? request.deadline_mono_ns : later(entry_ns, request.deadline_mono_ns);
}

}  // namespace batchd
