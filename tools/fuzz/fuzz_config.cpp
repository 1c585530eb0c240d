// libFuzzer harness: engine/config's YAML loader on arbitrary text.
//
// Input: YAML text, optionally followed by NUL-separated --set overrides ("key.path=value"), so
// both the file parser and the override parser see fuzzed bytes. A taco::UserError is the
// expected answer to bad input; a crash, a sanitizer report or any other exception (an escaped
// YAML::Exception, a std::out_of_range, a taco::Error from an internal check) is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "kernels/check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string yaml = input.substr(0, nul);
  std::vector<std::string> overrides;
  for (size_t begin = nul; begin != std::string::npos && begin < input.size();) {
    const size_t end = input.find('\0', begin + 1);
    overrides.push_back(input.substr(begin + 1, end == std::string::npos ? end : end - begin - 1));
    begin = end;
  }
  try {
    const taco::Config config = taco::load_config_text(yaml, "fuzz.yaml", overrides);
    // A config that loads must print and load back (what the run directory keeps).
    taco::load_config_text(taco::config_to_yaml(config), "fuzz-roundtrip.yaml");
  } catch (const taco::UserError&) {
  }
  return 0;
}
