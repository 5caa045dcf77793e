#include "daemon/config_file.hpp"

#include <fmt/format.h>

#include <toml++/toml.h>

namespace batchd {
namespace {

std::string flag_name(const std::string& table, std::string_view key) {
  std::string name = "--" + (table.empty() ? std::string() : table + "-") + std::string(key);
  for (char& c : name) {
    if (c == '_') c = '-';
  }
  return name;
}

// One scalar as the text a flag takes; false for tables, dates and other shapes no flag takes.
bool scalar_text(const toml::node& node, std::string& out) {
  if (auto s = node.value<std::string>()) {
    out = *s;
  } else if (node.is_boolean()) {
    out = *node.value<bool>() ? "true" : "false";
  } else if (node.is_integer()) {
    out = std::to_string(*node.value<std::int64_t>());
  } else if (node.is_floating_point()) {
    out = fmt::format("{}", *node.value<double>());
  } else {
    return false;
  }
  return true;
}

// Appends the flag one key stands for to `out` (ConfigArgs or ModelArgs).
template <class Out>
Expected<void> add_key(const std::string& path, const std::string& table, std::string_view key,
                       const toml::node& node, Out& out) {
  const std::string flag = flag_name(table, key);
  out.lines[flag] = node.source().begin.line;
  std::vector<const toml::node*> values;
  if (const toml::array* array = node.as_array()) {
    for (const toml::node& item : *array) values.push_back(&item);  // repeated flag
  } else {
    values.push_back(&node);
  }
  for (const toml::node* value : values) {
    std::string text;
    if (!scalar_text(*value, text)) {
      return make_failure(std::errc::invalid_argument,
                          fmt::format("{} line {}: '{}' must be a string, number, boolean or a "
                                      "list of them",
                                      path, value->source().begin.line, key));
    }
    out.args.push_back(flag);
    out.args.push_back(text);
  }
  return {};
}

// A table's keys, and those of the tables inside it (one level: [sim] is --sim-...).
template <class Out>
Expected<void> add_table(const std::string& path, const toml::table& table, Out& out) {
  for (const auto& [key, node] : table) {
    if (const toml::table* inner = node.as_table()) {
      for (const auto& [inner_key, inner_node] : *inner) {
        auto added = add_key(path, std::string(key.str()), inner_key.str(), inner_node, out);
        if (!added) return added.error();
      }
    } else if (auto added = add_key(path, "", key.str(), node, out); !added) {
      return added.error();
    }
  }
  return {};
}

Expected<void> add_models(const std::string& path, const toml::node& node, ConfigArgs& out) {
  const toml::table* models = node.as_table();
  if (models == nullptr) {
    return make_failure(std::errc::invalid_argument,
                        fmt::format("{} line {}: 'models' must be tables, one per model: [models.NAME]", path,
                                    node.source().begin.line));
  }
  for (const auto& [name, model_node] : *models) {
    const toml::table* table = model_node.as_table();
    if (table == nullptr) {
      return make_failure(std::errc::invalid_argument,
                          fmt::format("{} line {}: models.{} must be a table of that model's keys", path,
                                      model_node.source().begin.line, name.str()));
    }
    ModelArgs model;
    model.name = std::string(name.str());
    toml::table keys = *table;
    if (const toml::node* version = table->get("version")) {
      if (!scalar_text(*version, model.version)) {
        return make_failure(std::errc::invalid_argument,
                            fmt::format("{} line {}: models.{}.version must be a string", path,
                                        version->source().begin.line, model.name));
      }
      keys.erase("version");
    }
    if (auto added = add_table(path, keys, model); !added) return added.error();
    out.models.push_back(std::move(model));
  }
  return {};
}

}  // namespace

Expected<ConfigArgs> read_config_file(const std::string& path) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    // Line 0: no line at all (the file could not be read).
    const auto line = e.source().begin.line;
    return make_failure(std::errc::invalid_argument,
                        line == 0 ? fmt::format("{}: {}", path, e.description())
                                  : fmt::format("{} line {}: {}", path, line, e.description()));
  }
  ConfigArgs out;
  if (const toml::node* models = root.get("models")) {
    if (auto added = add_models(path, *models, out); !added) return added.error();
    root.erase("models");
  }
  if (auto added = add_table(path, root, out); !added) return added.error();
  return out;
}

}  // namespace batchd
