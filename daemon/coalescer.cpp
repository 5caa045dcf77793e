#include "daemon/coalescer.hpp"

#include "daemon/pending_queue.hpp"

namespace batchd {
namespace {

std::int64_t later(std::int64_t a_ns, std::int64_t b_ns) noexcept {
  return a_ns == 0 || b_ns == 0 ? 0 : std::max(a_ns, b_ns);
}

}  // namespace

bool Coalescer::follow_or_lead(std::string_view input, RequestRef& request) {
  const std::size_t rank = rank_of(request.priority);
  std::lock_guard lock(mu_);
  auto found = by_input_.find(input);
  if (found == by_input_.end()) {
    Entry entry;
    entry.token = next_token_++;
    entry.latest_deadline_ns = request.deadline_mono_ns;
    entry.best_rank = rank;
    entry.leaders = 1;
    input_of_.emplace(entry.token, input);
    request.lead = entry.token;
    by_input_.emplace(std::string(input), std::move(entry));
    return false;
  }
  Entry& entry = found->second;
  entry.latest_deadline_ns = later(entry.latest_deadline_ns, request.deadline_mono_ns);
  if (rank >= entry.best_rank) {  // a leader runs at least as urgently as it would
    entry.followers.push_back(std::move(request));
    return true;
  }
  entry.best_rank = rank;
  entry.leaders += 1;
  request.lead = entry.token;
  return false;
}

void Coalescer::settle(std::uint64_t token, shm::WireStatus status, std::vector<RequestRef>& out) {
  const bool settled = status == shm::WireStatus::kOk || status == shm::WireStatus::kBackendError;
  std::lock_guard lock(mu_);
  auto input = input_of_.find(token);
  if (input == input_of_.end()) return;  // another leader settled it already
  auto found = by_input_.find(input->second);
  Entry& entry = found->second;
  entry.leaders -= 1;
  if (!settled && entry.leaders > 0) return;
  out.reserve(out.size() + entry.followers.size());  // what may throw, before anything moves
  for (RequestRef& follower : entry.followers) out.push_back(std::move(follower));
  by_input_.erase(found);
  input_of_.erase(input);
}

std::int64_t Coalescer::expire_ns(std::uint64_t token) const {
  std::lock_guard lock(mu_);
  auto input = input_of_.find(token);
  if (input == input_of_.end()) return -1;
  return by_input_.find(input->second)->second.latest_deadline_ns;
}

std::int64_t expire_ns(const RequestRef& request) {
  if (request.lead == 0 || request.coalescer == nullptr) return request.deadline_mono_ns;
  const std::int64_t entry_ns = request.coalescer->expire_ns(request.lead);
  return entry_ns < 0 ? request.deadline_mono_ns : later(entry_ns, request.deadline_mono_ns);
}

}  // namespace batchd
