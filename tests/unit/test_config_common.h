// Shared by test_config_accepts.cpp and test_config_rejects.cpp: a small model section and the
// one-line UserError a bad experiment file must give.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/config/config.h"
#include "kernels/check.h"

namespace taco::test {

inline const std::string kModel =
    "model: { n_layer: 4, n_head: 4, d_model: 128, seq_len: 128, vocab_size: 256 }\n";

// kModel on line 1, `rest` from line 2 on.
inline std::string with_model(const std::string& rest) { return kModel + rest; }

// The message of the UserError that loading `yaml` as "bad.yaml" must throw: exit code 2, one line.
inline std::string rejection(const std::string& yaml,
                             const std::vector<std::string>& overrides = {}) {
  try {
    load_config_text(yaml, "bad.yaml", overrides);
  } catch (const UserError& e) {
    EXPECT_EQ(e.exit_code(), 2);
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
    return message;
  }
  ADD_FAILURE() << "accepted:\n" << yaml;
  return "";
}

}  // namespace taco::test
