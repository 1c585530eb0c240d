// Every relative link in the repository's Markdown (README.md, each folder's README.md, docs/)
// resolves to a file or folder inside the repository, and no link leaves it. Web links and
// in-page anchors are not followed.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/test_util.h"

namespace taco {
namespace {

namespace fs = std::filesystem;

struct Link {
  int line;
  std::string target;
};

// The targets of [text](target) and ![alt](target) in `markdown`, outside fenced code blocks
// and inline code spans.
std::vector<Link> links_of(const std::string& markdown) {
  std::vector<Link> out;
  std::istringstream in(markdown);
  bool fenced = false;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    const size_t first = line.find_first_not_of(' ');
    if (first != std::string::npos && line.compare(first, 3, "```") == 0) {
      fenced = !fenced;
      continue;
    }
    if (fenced) continue;
    bool code = false;
    for (size_t i = 0; i + 1 < line.size(); ++i) {
      if (line[i] == '`') code = !code;
      if (code || line[i] != ']' || line[i + 1] != '(') continue;
      const size_t close = line.find(')', i + 2);
      if (close == std::string::npos) continue;
      std::string target = line.substr(i + 2, close - i - 2);
      const size_t space = target.find(' ');  // [a](path "title")
      if (space != std::string::npos) target.resize(space);
      out.push_back({line_no, target});
    }
  }
  return out;
}

std::vector<fs::path> markdown_files(const fs::path& root) {
  std::vector<fs::path> files = {root / "README.md"};
  for (const auto& entry : fs::directory_iterator(root)) {
    if (!entry.is_directory()) continue;
    const std::string name = entry.path().filename().string();
    if (name[0] == '.' || name.rfind("build", 0) == 0 || name == "runs" || name == "data" ||
        name == "shared")
      continue;
    if (fs::exists(entry.path() / "README.md")) files.push_back(entry.path() / "README.md");
  }
  for (const auto& entry : fs::recursive_directory_iterator(root / "docs"))
    if (entry.path().extension() == ".md") files.push_back(entry.path());
  for (const auto& entry : fs::recursive_directory_iterator(root / "tools"))
    if (entry.path().extension() == ".md") files.push_back(entry.path());
  return files;
}

TEST(DocLinks, EveryRelativeLinkResolvesInsideTheRepository) {
  const fs::path root = fs::canonical(test::source_dir());
  const auto files = markdown_files(root);
  int checked = 0;
  for (const auto& file : files) {
    for (const Link& link : links_of(test::read_file(file.string()))) {
      std::string target = link.target;
      if (target.rfind("http://", 0) == 0 || target.rfind("https://", 0) == 0 ||
          target.rfind("mailto:", 0) == 0 || target.empty() || target[0] == '#')
        continue;
      target = target.substr(0, target.find('#'));
      const std::string where = file.lexically_relative(root).string() + ":" +
                                std::to_string(link.line) + ": " + link.target;
      EXPECT_NE(target[0], '/') << where << ": an absolute path; link relative to the file";
      const fs::path resolved = (file.parent_path() / target).lexically_normal();
      const std::string rel = resolved.lexically_relative(root).string();
      EXPECT_FALSE(rel.empty() || rel.rfind("..", 0) == 0) << where << ": leaves the repository";
      EXPECT_TRUE(fs::exists(resolved)) << where << ": no such file";
      ++checked;
    }
  }
  // README, the folder READMEs and docs/ link to one another: far more than a handful.
  EXPECT_GT(checked, 15) << "the link scanner found almost nothing; is it broken?";
}

// The scanner itself, on a made-up page: links in code are not links.
TEST(DocLinks, TheScannerFindsLinksAndSkipsCode) {
  const auto links = links_of(
      "see [a](docs/a.md) and ![pic](x.png \"t\")\n"
      "`[not](this)` text\n"
      "```\n[nor](this)\n```\n"
      "[web](https://example.org) [anchor](#top)\n");
  ASSERT_EQ(links.size(), 4u);
  EXPECT_EQ(links[0].target, "docs/a.md");
  EXPECT_EQ(links[1].target, "x.png");
  EXPECT_EQ(links[1].line, 1);
  EXPECT_EQ(links[2].target, "https://example.org");
  EXPECT_EQ(links[3].line, 6);
}

}  // namespace
}  // namespace taco
