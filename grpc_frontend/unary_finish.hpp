// A unary call answered at once with `status`, by its context's default reactor.
#pragma once

#include <grpcpp/grpcpp.h>

namespace batchd::grpcfront {

inline grpc::ServerUnaryReactor* finish(grpc::CallbackServerContext* call, const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = call->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

}  // namespace batchd::grpcfront
