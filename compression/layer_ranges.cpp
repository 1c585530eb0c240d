// The `layers` text of a compression rule: "all" | ITEM ("," ITEM)*, ITEM = N | N "-" M (N <= M).
#include <algorithm>
#include <charconv>
#include <string>
#include <vector>

#include "compression/spec.h"
#include "kernels/check.h"

namespace taco {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// A non-negative decimal number made of digits only, or -1.
long parse_layer_number(const std::string& s) {
  long value = -1;
  if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) return -1;
  return value;
}

}  // namespace

std::vector<int> parse_layer_ranges(const std::string& text, int n_layer) {
  const std::string expected =
      "\"all\", a layer \"3\", a range \"1-3\" or a list \"0,2,5-7\" of "
      "layers 0.." +
      std::to_string(n_layer - 1);
  const auto fail = [&](const std::string& what) -> void {
    throw UserError(what + "; expected " + expected);
  };
  std::vector<int> layers;
  const std::string all = trim(text);
  if (all == "all") {
    for (int i = 0; i < n_layer; ++i) layers.push_back(i);
    return layers;
  }
  if (all.empty()) fail("empty layer list");
  size_t start = 0;
  while (start <= all.size()) {
    size_t comma = all.find(',', start);
    if (comma == std::string::npos) comma = all.size();
    const std::string item = trim(all.substr(start, comma - start));
    const size_t dash = item.find('-');
    const long first = parse_layer_number(trim(item.substr(0, dash)));
    const long last =
        dash == std::string::npos ? first : parse_layer_number(trim(item.substr(dash + 1)));
    if (first < 0 || last < 0) fail("\"" + item + "\" in \"" + text + "\" is not a layer or range");
    if (last < first) fail("range \"" + item + "\" runs backwards");
    if (last >= n_layer)
      fail("\"" + text + "\" names layer " + std::to_string(last) +
           " but model.n_layer = " + std::to_string(n_layer));
    for (long i = first; i <= last; ++i) layers.push_back(static_cast<int>(i));
    start = comma + 1;
  }
  std::sort(layers.begin(), layers.end());
  layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
  return layers;
}

}  // namespace taco
