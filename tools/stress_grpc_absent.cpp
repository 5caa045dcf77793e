// The gRPC transport of a batchd-stress built without gRPC (meson -Dgrpc=disabled: scripts/test.sh's
// TSan build): --grpc says so instead of running.
#include "tools/stress_grpc_transport.hpp"

namespace batchd::stress {

Expected<std::unique_ptr<Transport>> make_grpc_transport(const Options& /*options*/, const InputPool& /*inputs*/) {
  return make_failure(std::errc::function_not_supported,
                      "this batchd-stress was built without gRPC (meson -Dgrpc=disabled): --grpc cannot run");
}

}  // namespace batchd::stress
