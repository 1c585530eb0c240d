// docs/config-reference.md is generated from the schema (engine/config/config_reference.h): the
// committed file must equal what this build generates, every key and site must carry a meaning,
// and the reference must name every key, enum value and site the reader accepts.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "engine/config/config_reference.h"
#include "engine/config/config_schema.h"
#include "tests/support/test_util.h"

namespace taco {
namespace {

using namespace config_detail;

std::string reference_file() {
  return test::read_file(test::source_dir() + "/docs/config-reference.md");
}

// Line number and both texts of the first line where a and b differ ("" when equal).
std::string first_difference(const std::string& a, const std::string& b) {
  std::istringstream sa(a), sb(b);
  std::string la, lb;
  for (int line = 1;; ++line) {
    const bool ga = bool(std::getline(sa, la)), gb = bool(std::getline(sb, lb));
    if (!ga && !gb) return "";
    if (!ga || !gb || la != lb)
      return "line " + std::to_string(line) + ":\n  committed: " + (ga ? la : "<end>") +
             "\n  generated: " + (gb ? lb : "<end>");
  }
}

TEST(ConfigReference, TheCommittedFileIsWhatTheSchemaGenerates) {
  const std::string committed = reference_file();
  const std::string generated = config_reference_markdown();
  EXPECT_TRUE(committed == generated)  // not EXPECT_EQ: it would print both files whole
      << "docs/config-reference.md is out of date; regenerate it with\n"
         "  build/taco-train --print-config-reference > docs/config-reference.md\n"
         "first difference at "
      << first_difference(committed, generated);
}

TEST(ConfigReference, EveryKeyAndSiteHasAMeaning) {
  const std::vector<std::string> missing = undocumented_config_keys();
  std::string list;
  for (const auto& k : missing) list += " " + k;
  EXPECT_TRUE(missing.empty()) << "keys without a meaning text in engine/config/config_schema.h "
                                  "or config_reference.cpp:"
                               << list;
}

// Each key appears as a table row with its full path; enum values, sites and groups appear too.
TEST(ConfigReference, NamesEveryKeyValueAndSiteTheReaderAccepts) {
  const std::string doc = config_reference_markdown();
  auto expect_row = [&](const std::string& path) {
    EXPECT_NE(doc.find("| `" + path + "` |"), std::string::npos) << path;
  };
  auto section = [&](const std::string& name, const auto& table) {
    for (const auto& key : keys_of(table)) expect_row(name + "." + key);
  };
  section("run", kRunFields);
  section("model", kModelFields);
  section("parallel", kParallelFields);
  section("train", kTrainFields);
  section("data", kDataFields);
  section("checkpoint", kCheckpointFields);
  section("log", kLogFields);
  for (const auto& key : kCompressionKeys) expect_row("compression." + key);
  for (const auto& key : kCodecKeys) expect_row(key);
  for (const auto& key : kRuleKeys) expect_row(key);
  for (const auto& name : kSiteNames) expect_row(std::string(name));
  for (const char* name : {"sp.grad", "tied.grad", "dp.param"}) expect_row(name);
  for (const Choices* choices : {&kBackends, &kStagedReduce, &kPrecisions, &kDevices, &kCodecs,
                                 &kFormats, &kScales, &kResume, &kNonfinite})
    for (const auto& value : *choices) EXPECT_NE(doc.find(value), std::string::npos) << value;
  for (int g : kGroups) EXPECT_NE(doc.find(std::to_string(g)), std::string::npos) << g;
  // Defaults come from the structs: a changed default changes the file.
  EXPECT_NE(doc.find("| `train.lr` | number | `0.003` |"), std::string::npos);
  EXPECT_NE(doc.find("| `compression.min_bytes` | integer | `0` |"), std::string::npos);
  EXPECT_NE(doc.find("| `compression.chunks` | integer or auto | `auto` |"), std::string::npos);
}

// taco-train --help lists the sections, their keys and the sites, and points at the reference.
TEST(ConfigReference, TheBriefListNamesEverySectionAndSite) {
  const std::string brief = config_keys_brief();
  for (const auto& s : kSections)
    EXPECT_NE(brief.find("  " + s + ": "), std::string::npos) << s << "\n" << brief;
  for (const auto& name : kSiteNames)
    EXPECT_NE(brief.find(std::string(name)), std::string::npos) << name;
  EXPECT_NE(brief.find("calibrate_steps"), std::string::npos) << brief;
}

}  // namespace
}  // namespace taco
