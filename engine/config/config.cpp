// The entry points: text or file -> YAML tree -> overrides -> typed config -> validated config.
#include "engine/config/config.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/config/config_source.h"
#include "kernels/check.h"

namespace taco {

Config load_config_text(const std::string& yaml_text, const std::string& source_name,
                        const std::vector<std::string>& overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    const int line = e.mark.is_null() ? 1 : e.mark.line + 1;
    throw UserError(config_detail::one_line(
        source_name + ":" + std::to_string(line) + ": YAML syntax error: " + e.msg +
        "; expected valid YAML (check indentation, ':' after keys, closing ] and })"));
  }
  if (root.IsNull()) root.reset(YAML::Node(YAML::NodeType::Map));
  config_detail::ConfigSource source(source_name, root);
  if (!root.IsMap())
    source.fail("", "the document is not a map",
                "sections such as model: { n_layer: 4, ... } at the top level");
  for (const auto& assignment : overrides) source.apply_override(assignment);
  Config config = config_detail::read_config(source);
  config_detail::validate_config(config, source);
  config.source = source_name;
  return config;
}

Config load_config_file(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UserError(path + ": cannot open config file: it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(path + ": cannot open config file: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw UserError(path + ": cannot open config file: read failed");
  return load_config_text(text.str(), path, overrides);
}

}  // namespace taco
