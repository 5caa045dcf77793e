// A gRPC inference names its model: batchd-grpc checks the request against that model's
// description (its input and output names) and answers in its name; a model or version the
// catalog lacks is NOT_FOUND naming what is served. No server: parse_infer_request and
// fill_infer_response alone.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "grpc_frontend/infer_request.hpp"
#include "oip/model.hpp"

using namespace batchd;

namespace {

const oip::ModelCatalog kTwoModels({oip::default_model(), {"langid", "2", "TEXT", "LANGUAGE"}});

inference::ModelInferRequest request_for(const std::string& model, const std::string& input_name,
                                         const std::string& version = "") {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  request.set_model_version(version);
  auto* tensor = request.add_inputs();
  tensor->set_name(input_name);
  tensor->set_datatype("BYTES");
  tensor->add_shape(1);
  tensor->mutable_contents()->add_bytes_contents("hello");
  return request;
}

grpc::Status parse(const inference::ModelInferRequest& request, grpcfront::ParsedInfer& out) {
  return grpcfront::parse_infer_request(request, kTwoModels, {}, 0, out);
}

}  // namespace

TEST_CASE("gRPC inference: each model of the catalog by name, checked against its own tensors") {
  const inference::ModelInferRequest request = request_for("langid", "TEXT");  // out's strings view it
  grpcfront::ParsedInfer out;
  REQUIRE(parse(request, out).ok());
  REQUIRE(out.reply.model != nullptr);
  CHECK(out.reply.model->name == "langid");
  CHECK(out.inputs == std::vector<std::string_view>{"hello"});

  std::vector<Result> results;
  results.emplace_back(Result::success("en"));
  inference::ModelInferResponse response;
  grpcfront::fill_infer_response(out.reply, results, response);
  CHECK(response.model_name() == "langid");
  CHECK(response.model_version() == "2");
  REQUIRE(response.outputs_size() == 1);
  CHECK(response.outputs(0).name() == "LANGUAGE");

  grpcfront::ParsedInfer default_model;
  REQUIRE(parse(request_for("batchstring", "INPUT", "1"), default_model).ok());
  CHECK(default_model.reply.model->name == "batchstring");

  grpcfront::ParsedInfer wrong_input;
  const grpc::Status other_models_input = parse(request_for("langid", "INPUT"), wrong_input);
  CHECK(other_models_input.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(other_models_input.error_message().find("for model 'langid': it takes 'TEXT'") != std::string::npos);

  inference::ModelInferRequest wrong_output = request_for("langid", "TEXT");
  wrong_output.add_outputs()->set_name("OUTPUT");
  grpcfront::ParsedInfer unused;
  const grpc::Status output = parse(wrong_output, unused);
  CHECK(output.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(output.error_message().find("it has 'LANGUAGE'") != std::string::npos);
}

TEST_CASE("gRPC inference: a model or version not in the catalog is NOT_FOUND, naming what is served") {
  grpcfront::ParsedInfer out;
  const grpc::Status unknown = parse(request_for("embedder", "INPUT"), out);
  CHECK(unknown.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(unknown.error_message() == "unknown model 'embedder': this server serves 'batchstring', 'langid'");
  const grpc::Status version = parse(request_for("langid", "TEXT", "1"), out);
  CHECK(version.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(version.error_message().find("it has version 2") != std::string::npos);
}
