#include "grpc_frontend/infer_request.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "oip/bytes_tensor.hpp"
#include "oip/errors.hpp"
#include "oip/model.hpp"

namespace batchd::grpcfront {

namespace {

grpc::Status invalid(std::string message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::move(message));
}

// Whether a tensor's contents carry anything but strings (what another datatype would send).
bool has_non_bytes_contents(const inference::InferTensorContents& contents) {
  return contents.bool_contents_size() != 0 || contents.int_contents_size() != 0 ||
         contents.int64_contents_size() != 0 || contents.uint_contents_size() != 0 ||
         contents.uint64_contents_size() != 0 || contents.fp32_contents_size() != 0 ||
         contents.fp64_contents_size() != 0;
}

// Triton's request timeout, in microseconds, as an int64 or uint64 parameter.
grpc::Status read_timeout(const inference::ModelInferRequest& request, const InferLimits& limits,
                          std::optional<std::chrono::milliseconds>& timeout) {
  const auto it = request.parameters().find("timeout");
  if (it == request.parameters().end()) return grpc::Status::OK;
  std::uint64_t us = 0;
  if (it->second.has_int64_param() && it->second.int64_param() > 0) {
    us = static_cast<std::uint64_t>(it->second.int64_param());
  } else if (it->second.has_uint64_param() && it->second.uint64_param() > 0) {
    us = it->second.uint64_param();
  } else {
    return invalid("the parameter timeout must be a positive whole number of microseconds");
  }
  timeout = oip::timeout_parameter(us, limits.max_timeout);
  return grpc::Status::OK;
}

// The claimed class: Triton's uint64 level (or an int64 one), or a string naming the class.
grpc::Status read_priority(const inference::ModelInferRequest& request, Priority& priority) {
  const auto it = request.parameters().find("priority");
  if (it == request.parameters().end()) return grpc::Status::OK;
  const inference::InferParameter& p = it->second;
  if (p.has_uint64_param()) {
    priority = priority_of_level(p.uint64_param());
  } else if (p.has_int64_param() && p.int64_param() >= 0) {
    priority = priority_of_level(static_cast<std::uint64_t>(p.int64_param()));
  } else if (std::optional<Priority> named = p.has_string_param() ? parse_priority(p.string_param()) : std::nullopt) {
    priority = *named;
  } else {
    return invalid("the parameter priority must be a level (1 highest, 0 the default) or high, normal or low");
  }
  return grpc::Status::OK;
}

grpc::Status read_data(const inference::ModelInferRequest& request, std::size_t elements, ParsedInfer& out) {
  const inference::ModelInferRequest::InferInputTensor& input = request.inputs(0);
  const std::string& name = out.reply.model->input;
  if (has_non_bytes_contents(input.contents())) {
    return invalid(fmt::format("input '{}' is BYTES: its contents may hold only bytes_contents", name));
  }
  if (request.raw_input_contents_size() != 0) {
    if (request.raw_input_contents_size() != 1) {
      return invalid(fmt::format("raw_input_contents has {} entries for the request's 1 input",
                                 request.raw_input_contents_size()));
    }
    if (input.contents().bytes_contents_size() != 0) {
      return invalid(fmt::format("input '{}' has both contents and raw_input_contents", name));
    }
    if (auto fault = oip::decode_bytes_elements(request.raw_input_contents(0), elements, out.inputs)) {
      return invalid(fmt::format("input '{}': {}", name, *fault));
    }
    return grpc::Status::OK;
  }
  const auto& strings = input.contents().bytes_contents();
  if (static_cast<std::size_t>(strings.size()) != elements) {
    return invalid(fmt::format("input '{}' has {} strings in bytes_contents but its shape holds {}", name,
                               strings.size(), elements));
  }
  out.inputs.reserve(elements);
  for (const std::string& s : strings) out.inputs.emplace_back(s);
  return grpc::Status::OK;
}

}  // namespace

grpc::Status parse_infer_request(const inference::ModelInferRequest& request, const oip::ModelCatalog& models,
                                 const InferLimits& limits, std::uint32_t max_input_bytes, ParsedInfer& out) {
  oip::ModelCatalog::Lookup found = models.find(request.model_name(), request.model_version());
  if (!found.model) return grpc::Status(grpc::StatusCode::NOT_FOUND, std::move(found.error));
  out.reply.model = std::move(found.model);
  const oip::ModelDescription& model = *out.reply.model;
  if (auto wrong = oip::check_input_count(model, static_cast<std::size_t>(request.inputs_size()))) {
    return invalid(*wrong);
  }
  const auto& input = request.inputs(0);
  if (auto wrong = oip::check_input_tensor(model, input.name(), input.datatype())) return invalid(*wrong);
  for (const auto& output : request.outputs()) {
    if (auto wrong = oip::check_output_name(model, output.name())) return invalid(*wrong);
  }
  out.reply.shape.assign(input.shape().begin(), input.shape().end());
  const oip::ShapeCheck check = oip::check_input_shape(model, out.reply.shape, limits.max_elements);
  if (check.error) return invalid(*check.error);
  if (grpc::Status status = read_timeout(request, limits, out.timeout); !status.ok()) return status;
  if (grpc::Status status = read_priority(request, out.priority); !status.ok()) return status;
  if (grpc::Status status = read_data(request, check.elements, out); !status.ok()) return status;
  out.reply.id = oip::echoed_id(request.id());
  if (auto wrong = oip::check_strings(model, out.inputs, max_input_bytes)) return invalid(*wrong);
  return grpc::Status::OK;
}

Priority priority_of_level(std::uint64_t level) noexcept {
  if (level == 1) return Priority::kHigh;
  return level >= 3 ? Priority::kLow : Priority::kNormal;
}

void fill_infer_response(const InferReply& reply, std::span<Result> results, inference::ModelInferResponse& response) {
  response.set_model_name(reply.model->name);
  response.set_model_version(reply.model->version);
  response.set_id(reply.id);
  auto* output = response.add_outputs();
  output->set_name(reply.model->output);
  output->set_datatype(std::string(oip::kBytesType));
  for (const std::int64_t dim : reply.shape) output->add_shape(dim);
  std::size_t bytes = 0;
  for (const Result& result : results) bytes += result.output().size();
  std::string* raw = response.add_raw_output_contents();
  raw->reserve(oip::framed_size(results.size(), bytes));
  for (const Result& result : results) oip::append_bytes_element(*raw, result.output());
}

grpc::Status status_for_error(const Error& error, oip::OverloadStatus overload) {
  return grpc::Status(static_cast<grpc::StatusCode>(oip::map_error(error.code, overload).grpc_code), error.message);
}

}  // namespace batchd::grpcfront
