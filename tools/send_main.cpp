// batchd-send: sends one request (an argument, or stdin) and prints the answer; for trying a
// daemon by hand and for scripts. Exit 0 with the answer on stdout, 1 with the error on stderr.
#include <CLI/CLI.hpp>

#include <iostream>
#include <iterator>

#include "client_lib/client.hpp"

int main(int argc, char** argv) {
  std::string socket_path;
  std::string input;
  std::string model;
  bool from_stdin = false;
  unsigned timeout_ms = 5000;
  CLI::App app{"batchd-send: send one request to batchd and print its answer"};
  app.add_option("--socket", socket_path, "daemon socket (default: the daemon's default path)");
  app.add_option("--timeout-ms", timeout_ms, "give up after this long")->capture_default_str();
  app.add_option("--model", model, "the model, by name (default: the daemon's default model)");
  app.add_flag("--stdin", from_stdin, "read the input from standard input");
  app.add_option("input", input, "the input string");
  CLI11_PARSE(app, argc, argv);
  if (from_stdin) input.assign(std::istreambuf_iterator<char>(std::cin), {});

  batchd::ClientOptions options;
  options.socket_path = socket_path;
  options.connect_timeout = std::chrono::milliseconds(timeout_ms);
  batchd::Error error;
  auto client = batchd::Client::connect(options, &error);
  if (!client) {
    std::cerr << "batchd-send: " << error.message << '\n';
    return 1;
  }
  batchd::Result result = client->submit(input, std::chrono::milliseconds(timeout_ms),
                                                  batchd::RequestOptions{batchd::Priority::kNormal, model});
  if (!result.ok()) {
    std::cerr << "batchd-send: " << batchd::error_code_name(result.error().code) << ": "
              << result.error().message << '\n';
    return 1;
  }
  std::cout << result.output() << '\n';
  return 0;
}
