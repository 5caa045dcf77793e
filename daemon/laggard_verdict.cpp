#include "daemon/laggard_verdict.hpp"

namespace batchd {

PoolSpeed LaggardVerdict::judge(std::span<const DeviceSpeed> devices, std::uint64_t laggards_before) noexcept {
  PoolSpeed speed;
  bool any = false;
  for (unsigned d = 0; d < devices.size(); ++d) {
    const DeviceSpeed& device = devices[d];
    if (!device.available || !has_evidence(device)) continue;
    if (!any || device.reference_ns < speed.fastest_ns) {
      speed.fastest_ns = device.reference_ns;
      speed.fastest_device = d;
      any = true;
    }
  }
  if (!any) return speed;
  for (unsigned d = 0; d < devices.size() && d < 64; ++d) {
    const DeviceSpeed& device = devices[d];
    if (!has_evidence(device)) continue;  // a fresh window: tried, not judged
    const bool was = (laggards_before >> d & 1U) != 0;
    const double factor = was ? kBackFactor : kFactor;
    if (device.reference_ns > factor * speed.fastest_ns + kSlackNs) speed.laggards |= std::uint64_t{1} << d;
  }
  return speed;
}

}  // namespace batchd
