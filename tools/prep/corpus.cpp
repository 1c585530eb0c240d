#include "tools/prep/corpus.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "kernels/check.h"

namespace taco::prep {

namespace fs = std::filesystem;

namespace {

// Fortune files sit next to their strfile index (*.dat) and a UTF-8 alias (*.u8, a symlink to
// the text): reading those would add binary noise or every fortune twice.
bool skipped_name(const std::string& name) {
  return name.empty() || name[0] == '.' || name.ends_with(".dat") || name.ends_with(".u8");
}

// fopen(path, "rb"), or a UserError naming the file.
FILE* open_for_reading(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    throw UserError(path + ": cannot read (" + std::string(std::strerror(errno)) +
                    "); check the path and its permissions");
  }
  return f;
}

void check_readable(const std::string& path) { std::fclose(open_for_reading(path)); }

bool is_blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isspace((unsigned char)c); });
}

bool is_separator(std::string_view line) { return line == "%" || line == "%\r"; }

}  // namespace

InputFiles list_input_files(const std::vector<std::string>& inputs) {
  InputFiles out;
  for (const auto& input : inputs) {
    std::error_code ec;
    const auto status = fs::status(input, ec);
    if (ec || !fs::exists(status)) {
      throw UserError(input + ": no such file or directory; give text files or directories");
    }
    if (!fs::is_directory(status)) {
      check_readable(input);
      out.files.push_back(input);
      continue;
    }
    fs::directory_iterator it(input, ec);
    if (ec) throw UserError(input + ": cannot list directory (" + ec.message() + ")");
    for (const auto& entry : it) {
      const std::string name = entry.path().filename().string();
      if (skipped_name(name) || !entry.is_regular_file(ec)) {
        ++out.skipped;
        continue;
      }
      check_readable(entry.path().string());
      out.files.push_back(entry.path().string());
    }
  }
  std::sort(out.files.begin(), out.files.end());
  out.files.erase(std::unique(out.files.begin(), out.files.end()), out.files.end());
  return out;
}

std::string read_text_file(const std::string& path) {
  FILE* f = open_for_reading(path);
  std::string text;
  char buf[1 << 16];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, got);
  const bool failed = std::ferror(f);
  std::fclose(f);
  if (failed) throw UserError(path + ": read error; check the file");
  return text;
}

std::vector<std::string_view> split_documents(std::string_view text) {
  // Lines are [begin, end) with `next` past the '\n'; the last line may lack one.
  auto for_each_line = [&](auto fn) {
    for (size_t begin = 0; begin < text.size();) {
      const size_t nl = text.find('\n', begin);
      const size_t end = nl == std::string_view::npos ? text.size() : nl;
      const size_t next = nl == std::string_view::npos ? text.size() : nl + 1;
      if (!fn(begin, end, next)) return;
      begin = next;
    }
  };
  bool fortune = false;
  for_each_line([&](size_t b, size_t e, size_t) {
    fortune = is_separator(text.substr(b, e - b));
    return !fortune;
  });

  std::vector<std::string_view> docs;
  auto add = [&](std::string_view doc) {
    if (!is_blank(doc)) docs.push_back(doc);
  };
  if (!fortune) {
    add(text);
    return docs;
  }
  size_t doc_begin = 0;
  for_each_line([&](size_t b, size_t e, size_t next) {
    if (is_separator(text.substr(b, e - b))) {
      add(text.substr(doc_begin, b - doc_begin));
      doc_begin = next;
    }
    return true;
  });
  add(text.substr(doc_begin));
  return docs;
}

}  // namespace taco::prep
