// The user-facing description of the config schema, generated from the key tables of
// config_schema.h and the site names of compression/spec.h, so the reference cannot drift from
// what the reader accepts: docs/config-reference.md is config_reference_markdown() verbatim
// (`taco-train --print-config-reference > docs/config-reference.md`; a test compares them).
#pragma once

#include <string>
#include <vector>

namespace taco {

// docs/config-reference.md: every section and key with its type, default and meaning, the codec
// spec and rule keys, the layer-range syntax and every communication site.
std::string config_reference_markdown();

// Keys and sites whose meaning text is missing ("train.lr", "site attn.out.fwd"); the reference
// needs it empty, and tests/unit/test_config_reference.cpp fails otherwise.
std::vector<std::string> undocumented_config_keys();

// A few lines for taco-train --help: each section with its keys, and the site names.
std::string config_keys_brief();

}  // namespace taco
