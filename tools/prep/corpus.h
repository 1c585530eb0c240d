// taco-prep's view of its inputs: which files to read and how a file's text splits into
// documents.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace taco::prep {

struct InputFiles {
  std::vector<std::string> files;  // sorted by path, no duplicates
  size_t skipped = 0;              // directory entries left out (hidden, *.dat, *.u8, not files)
};

// Expands INPUT arguments: a file is taken as given; a directory contributes its regular files
// (not recursive), leaving out hidden files and the fortune index files *.dat and *.u8 (symlinks
// with those names too). Throws UserError for an input that does not exist or cannot be read.
InputFiles list_input_files(const std::vector<std::string>& inputs);

// The whole file. Throws UserError naming the file when it cannot be read.
std::string read_text_file(const std::string& path);

// Documents of one file's text, as views into it. A fortune file (one that has a line holding
// just "%") gives one document per fortune, without the "%" lines; any other file is one
// document. Documents holding only whitespace are dropped.
std::vector<std::string_view> split_documents(std::string_view text);

}  // namespace taco::prep
