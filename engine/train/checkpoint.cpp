#include "engine/train/checkpoint.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kernels/check.h"
#include "parallel/fault_point.h"
#include "parallel/host_values.h"
#include "parallel/mpi_communicator.h"

namespace taco {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'T', 'A', 'C', 'O', 'C', 'K', 'P', '1'};
constexpr char kEndMagic[8] = {'T', 'A', 'C', 'O', 'E', 'N', 'D', '1'};
constexpr uint32_t kVersion = 1;
constexpr const char* kMarker = "COMPLETE";
constexpr Site kSite = Site::checkpoint;  // the site the watchdog names for our agreements

// 64-bit FNV-1a over 8-byte words (bytes for the tail), with the length mixed in at the end.
class Checksum {
 public:
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    length_ += n;
    // Finish a word started by an earlier call.
    while (n > 0 && pending_n_ > 0 && pending_n_ < 8) {
      pending_ |= uint64_t(*p++) << (8 * pending_n_++);
      --n;
      if (pending_n_ == 8) word(pending_), pending_ = 0, pending_n_ = 0;
    }
    for (; n >= 8; n -= 8, p += 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      word(w);
    }
    for (; n > 0; --n) pending_ |= uint64_t(*p++) << (8 * pending_n_++);
  }
  uint64_t value() const {
    uint64_t h = h_;
    if (pending_n_ > 0) h = (h ^ pending_) * kPrime;
    return (h ^ length_) * kPrime;
  }

 private:
  static constexpr uint64_t kPrime = 0x100000001b3ull;
  void word(uint64_t w) { h_ = (h_ ^ w) * kPrime; }
  uint64_t h_ = 0xcbf29ce484222325ull;
  uint64_t pending_ = 0;
  int pending_n_ = 0;
  uint64_t length_ = 0;
};

std::string join_header(const std::map<std::string, std::string>& header,
                        const std::vector<CheckpointPart>& sections) {
  std::string text;
  for (const auto& [k, v] : header) {
    TACO_CHECK(k.find_first_of("=\n") == std::string::npos && v.find('\n') == std::string::npos,
               "checkpoint header key/value may not hold '=' (key) or newlines");
    text += k + "=" + v + "\n";
  }
  for (const CheckpointPart& s : sections)
    text += "section=" + s.name + " " + std::to_string(s.bytes.size()) + "\n";
  return text;
}

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) return;  // best effort for folders on filesystems that refuse
  ::fsync(fd);
  ::close(fd);
}

int64_t parse_step(const std::string& name) {
  if (name.rfind("step_", 0) != 0 || name.size() <= 5) return -1;
  const std::string digits = name.substr(5);
  if (!std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoll(digits);
}

// Complete and marker-less step folders under dir, newest first.
void scan(const std::string& dir, std::vector<std::pair<int64_t, std::string>>* complete,
          std::vector<std::string>* partial) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_directory()) continue;
    const std::string name = e.path().filename().string();
    const int64_t step = parse_step(name);
    if (step < 0) {
      if (partial && name.size() > 4 && name.substr(name.size() - 4) == ".tmp")
        partial->push_back(e.path().string());
      continue;
    }
    if (fs::exists(e.path() / kMarker))
      complete->emplace_back(step, e.path().string());
    else if (partial)
      partial->push_back(e.path().string());
  }
  std::sort(complete->begin(), complete->end(), std::greater<>());
}

std::map<std::string, std::string> read_marker(const std::string& folder) {
  std::map<std::string, std::string> kv;
  std::ifstream in(folder + "/" + kMarker);
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return kv;
}

std::atomic<int> g_stop_signal{0};
// stdout / stderr to make non-blocking on a stop signal, found before any signal arrives.
bool g_nonblock_on_stop[3] = {false, false, false};

// Records the signal. mpirun, once told to stop (Ctrl-C, SIGTERM), no longer reads its ranks'
// output (a pty or a pipe per rank): a rank that writes a log line into the full buffer would
// block until mpirun's SIGKILL and never save. So that output becomes non-blocking here (a line
// that does not fit is dropped; log.txt still gets it). A user's terminal (no launcher) stays
// as it is: its shell shares the flag, and it keeps reading.
void taco_stop_handler(int signo) {
  g_stop_signal.store(signo);
  for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
    if (!g_nonblock_on_stop[fd]) continue;
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  }
}

}  // namespace

const CheckpointPart* RankCheckpoint::find(const std::string& name) const {
  for (const CheckpointPart& s : sections)
    if (s.name == name) return &s;
  return nullptr;
}

std::string checkpoint_step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", (long long)step);
  return buf;
}

std::string rank_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank_%05d.bin", rank);
  return buf;
}

void write_rank_checkpoint(const std::string& path,
                           const std::map<std::string, std::string>& header,
                           const std::vector<CheckpointPart>& sections) {
  const std::string part = path + ".part";
  std::FILE* f = std::fopen(part.c_str(), "wb");
  if (!f) throw Error(part + ": cannot create checkpoint file: " + std::strerror(errno), 1);
  const std::string text = join_header(header, sections);
  Checksum sum;
  bool ok = std::fwrite(kMagic, 1, 8, f) == 8;
  auto put = [&](const void* p, size_t n) {
    if (n == 0) return;  // an empty section (no master weights on the CPU) has no data pointer
    ok = ok && std::fwrite(p, 1, n, f) == n;
    sum.add(p, n);
  };
  const uint64_t header_len = text.size();
  put(&kVersion, sizeof kVersion);
  put(&header_len, sizeof header_len);
  put(text.data(), text.size());
  for (size_t i = 0; i < sections.size(); ++i) {
    if (i == sections.size() / 2) std::fflush(f), fault_point("ckpt.write");  // a torn file
    put(sections[i].bytes.data(), sections[i].bytes.size());
  }
  const uint64_t checksum = sum.value();
  ok = ok && std::fwrite(&checksum, 1, 8, f) == 8 && std::fwrite(kEndMagic, 1, 8, f) == 8;
  ok = ok && std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
  const int saved_errno = errno;
  ok = std::fclose(f) == 0 && ok;
  if (!ok) {
    std::remove(part.c_str());
    throw Error(part + ": writing the checkpoint failed: " + std::strerror(saved_errno) +
                    " (disk full? set checkpoint.dir elsewhere)",
                1);
  }
  if (std::rename(part.c_str(), path.c_str()) != 0)
    throw Error(path + ": cannot rename the finished checkpoint file: " + std::strerror(errno), 1);
}

namespace {

// Reads and checks one rank file; with `keep` false the sections are checked in 4 MB pieces and
// not kept (out->sections then have names and empty bytes), so that verifying a checkpoint does
// not hold a second copy of the state in memory.
RankCheckpoint read_rank_file(const std::string& path, bool keep) {
  auto bad = [&](const std::string& what) {
    return UserError(path + ": " + what + "; the checkpoint is damaged or incomplete");
  };
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(path + ": cannot open checkpoint file: " + std::strerror(errno));
  std::error_code ec;
  const uint64_t file_size = fs::file_size(path, ec);
  if (ec) throw bad("cannot read its size");
  char magic[8];
  uint32_t version = 0;
  uint64_t header_len = 0;
  Checksum sum;
  if (!in.read(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) throw bad("not a taco checkpoint");
  if (!in.read(reinterpret_cast<char*>(&version), sizeof version)) throw bad("truncated header");
  if (version != kVersion)
    throw UserError(path + ": checkpoint format version " + std::to_string(version) +
                    ", this build reads version " + std::to_string(kVersion));
  if (!in.read(reinterpret_cast<char*>(&header_len), sizeof header_len) || header_len > file_size)
    throw bad("truncated header");
  sum.add(&version, sizeof version);
  sum.add(&header_len, sizeof header_len);
  std::string text(header_len, '\0');
  if (!in.read(text.data(), std::streamsize(header_len))) throw bad("truncated header");
  sum.add(text.data(), text.size());

  RankCheckpoint out;
  std::vector<uint64_t> sizes;
  std::istringstream lines(text);
  std::string line;
  uint64_t payload = 0;
  while (std::getline(lines, line)) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) throw bad("malformed header line '" + line + "'");
    const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    if (key == "section") {
      const size_t sp = value.rfind(' ');
      if (sp == std::string::npos) throw bad("malformed section line '" + line + "'");
      CheckpointPart s;
      s.name = value.substr(0, sp);
      const uint64_t n = std::stoull(value.substr(sp + 1));
      if (n > file_size) throw bad("section " + s.name + " larger than the file");
      if (keep) s.bytes.resize(n);
      sizes.push_back(n);
      payload += n;
      out.sections.push_back(std::move(s));
    } else {
      out.header[key] = value;
    }
  }
  const uint64_t expected = 8 + sizeof version + sizeof header_len + header_len + payload + 16;
  if (file_size != expected)
    throw bad("size " + std::to_string(file_size) + " bytes, expected " + std::to_string(expected));
  std::vector<char> piece(keep ? 0 : size_t(4) << 20);
  for (size_t i = 0; i < out.sections.size(); ++i) {
    CheckpointPart& s = out.sections[i];
    for (uint64_t done = 0; done < sizes[i];) {
      const uint64_t n = keep ? sizes[i] : std::min<uint64_t>(piece.size(), sizes[i] - done);
      char* dst = keep ? reinterpret_cast<char*>(s.bytes.data()) : piece.data();
      if (!in.read(dst, std::streamsize(n))) throw bad("truncated in section " + s.name);
      sum.add(dst, n);
      done += n;
    }
  }
  uint64_t checksum = 0;
  char end[8];
  if (!in.read(reinterpret_cast<char*>(&checksum), 8) || !in.read(end, 8) ||
      std::memcmp(end, kEndMagic, 8) != 0)
    throw bad("missing end marker");
  if (checksum != sum.value()) throw bad("checksum mismatch");
  return out;
}

}  // namespace

RankCheckpoint read_rank_checkpoint(const std::string& path) { return read_rank_file(path, true); }

void verify_rank_checkpoint(const std::string& path) { read_rank_file(path, false); }

std::string newest_complete_checkpoint(const std::string& dir, std::vector<std::string>* partial) {
  std::vector<std::pair<int64_t, std::string>> complete;
  scan(dir, &complete, partial);
  return complete.empty() ? std::string() : complete.front().second;
}

std::vector<std::string> complete_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> complete;
  scan(dir, &complete, nullptr);
  std::vector<std::string> out;
  for (const auto& [step, path] : complete) out.push_back(path);
  return out;
}

void check_checkpoint_dir_writable(const std::string& dir, MPI_Comm world_comm) {
  MpiCommunicator world(world_comm, "world");
  const int rank = world.rank();
  std::string message;
  bool ok = true;
  if (rank == 0) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) {
      ok = false;
      message = dir + ": cannot create the checkpoint folder: " + ec.message() +
                " (set checkpoint.dir to a writable place, or checkpoint.keep: 0 for none)";
    }
  }
  if (agree(world, ok, &message, kSite)) {
    // Every rank writes its own file there at a save: every rank probes (shared or not).
    const std::string probe = dir + "/.write_test_rank_" + std::to_string(rank);
    std::FILE* f = std::fopen(probe.c_str(), "wb");
    const bool wrote = f && std::fputc('x', f) != EOF && std::fclose(f) == 0;
    if (!wrote) {
      ok = false;
      message = "rank " + std::to_string(rank) + ": " + dir +
                ": the checkpoint folder is not writable (" + std::strerror(errno) +
                "); set checkpoint.dir to a writable place, or checkpoint.keep: 0 for none";
      if (f && !wrote) std::fclose(f);
    }
    std::remove(probe.c_str());
    if (agree(world, ok, &message, kSite)) return;
  }
  throw UserError(message);
}

Checkpointer::Checkpointer(std::string dir, int keep, MPI_Comm world)
    : dir_(std::move(dir)),
      keep_(std::max(1, keep)),
      world_(std::make_unique<MpiCommunicator>(world, "world")),
      rank_(world_->rank()),
      size_(world_->size()) {}

Checkpointer::~Checkpointer() = default;

std::string Checkpointer::save(int64_t step, const std::string& layout,
                               const std::map<std::string, std::string>& header,
                               const std::vector<CheckpointPart>& sections) {
  const std::string name = checkpoint_step_name(step);
  const std::string tmp = dir_ + "/" + name + ".tmp";
  const std::string final_dir = dir_ + "/" + name;
  std::string message;
  bool ok = true;
  if (rank_ == 0) {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    fs::remove_all(tmp, ec);  // left by an interrupted save of the same step
    if (!fs::create_directories(tmp, ec)) {
      ok = false;
      message = tmp + ": cannot create checkpoint folder: " + ec.message() +
                " (set checkpoint.dir to a writable place)";
    }
  }
  if (!agree(*world_, ok, &message, kSite)) throw Error(message, 1);

  std::map<std::string, std::string> h = header;
  h["layout"] = layout;
  h["step"] = std::to_string(step);
  h["rank"] = std::to_string(rank_);
  h["world"] = std::to_string(size_);
  try {
    write_rank_checkpoint(tmp + "/" + rank_file_name(rank_), h, sections);
  } catch (const std::exception& e) {
    ok = false;
    message = "rank " + std::to_string(rank_) + ": " + e.what();
  }
  if (!agree(*world_, ok, &message, kSite)) throw Error(message, 1);

  if (rank_ == 0) {
    try {
      std::error_code ec;
      fsync_path(tmp, true);
      fault_point("ckpt.rename");
      if (fs::exists(final_dir)) {
        // An unusable folder of the same step (no marker, or damaged: a usable one would have
        // been resumed from): moved aside, not removed.
        std::string aside = final_dir + ".damaged";
        for (int n = 2; fs::exists(aside); ++n) aside = final_dir + ".damaged" + std::to_string(n);
        fs::rename(final_dir, aside);
        spdlog::warn("checkpoint {}: an unusable earlier save of this step; moved aside to {}",
                     final_dir, aside);
      }
      fs::rename(tmp, final_dir);
      fault_point("ckpt.marker");
      const std::string marker = final_dir + "/" + kMarker;
      {
        std::ofstream m(marker + ".part");
        m << "layout=" << layout << "\nstep=" << step << "\nworld=" << size_ << "\n";
        if (!m) throw Error(marker + ": cannot write the checkpoint marker", 1);
      }
      fsync_path(marker + ".part", false);
      fs::rename(marker + ".part", marker);
      fsync_path(final_dir, true);
      fsync_path(dir_, true);
      fault_point("ckpt.retention");
    } catch (const std::exception& e) {
      ok = false;
      message = e.what();
    }
  }
  if (!agree(*world_, ok, &message, kSite)) throw Error(message, 1);
  known_good_.insert(step);
  apply_retention(step);
  return final_dir;
}

bool Checkpointer::verify_folder(const std::string& folder, int world, std::string* message) {
  bool ok = true;
  try {
    for (int r = rank_; r < world; r += size_) {
      const std::string file = folder + "/" + rank_file_name(r);
      verify_rank_checkpoint(file);
    }
  } catch (const std::exception& e) {
    ok = false;
    *message = e.what();
  }
  return agree(*world_, ok, message, kSite);
}

void Checkpointer::apply_retention(int64_t saved_step) {
  // Rank 0 lists the folders ("STEP WORLD PATH" per complete one, newest first); every rank
  // then walks them in the same order, verifying the ones not known good until `keep_` are.
  std::string plan;
  std::vector<std::string> partial;
  if (rank_ == 0) {
    std::vector<std::pair<int64_t, std::string>> complete;
    scan(dir_, &complete, &partial);
    for (const auto& [step, path] : complete) {
      const auto marker = read_marker(path);
      const auto it = marker.find("world");
      plan +=
          std::to_string(step) + " " + (it == marker.end() ? "0" : it->second) + " " + path + "\n";
    }
  }
  plan = broadcast_string(*world_, plan, 0, kSite);

  int good = 0;
  bool newer_than_resumed = false;  // a verified checkpoint after the one this run resumed from
  std::istringstream lines(plan);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    int64_t step = 0;
    int world = 0;
    std::string path;
    fields >> step >> world;
    std::getline(fields >> std::ws, path);
    // Never the save just made: a newer folder (one that failed its checks when this run
    // resumed and passes them now) would otherwise outrank it, and every later save of this
    // run would be deleted as soon as it was written.
    const bool protect = (step == resumed_step_ && !newer_than_resumed) || step == saved_step;
    if (good >= keep_ && !protect) {
      if (rank_ == 0) {
        std::error_code ec;
        fs::remove_all(path, ec);
      }
      continue;
    }
    std::string why;
    if (known_good_.count(step) == 0) {
      if (world < 1) {
        why = path + "/" + kMarker + ": no world= line";
      } else if (verify_folder(path, world, &why)) {
        known_good_.insert(step);
      }
    }
    if (known_good_.count(step) != 0) {
      ++good;
      if (step > resumed_step_) newer_than_resumed = true;
      continue;
    }
    if (rank_ == 0) {  // damaged: moved aside, never counted, never deleted
      std::string aside = path + ".damaged";
      std::error_code ec;
      for (int n = 2; fs::exists(aside); ++n) aside = path + ".damaged" + std::to_string(n);
      fs::rename(path, aside, ec);
      spdlog::warn("checkpoint {}: {}; moved aside to {} (not counted by checkpoint.keep)", path,
                   why, ec ? path + " (rename failed: " + ec.message() + ")" : aside);
    }
  }
  if (rank_ == 0) {
    std::error_code ec;
    for (const std::string& p : partial) fs::remove_all(p, ec);  // interrupted saves
  }
}

int64_t Checkpointer::newest_step() {
  std::string list;
  if (rank_ == 0) {
    std::vector<std::pair<int64_t, std::string>> complete;
    scan(dir_, &complete, nullptr);
    list = complete.empty() ? "-1" : std::to_string(complete.front().first);
  }
  return std::stoll(broadcast_string(*world_, list, 0, kSite));
}

int64_t Checkpointer::restore(const std::string& layout, RankCheckpoint* out) {
  // Rank 0 lists the candidates and checks their markers; all ranks then try them in order.
  std::string plan;  // "STEP PATH\n" per candidate, or "!message" for a layout mismatch
  if (rank_ == 0) {
    std::vector<std::pair<int64_t, std::string>> complete;
    std::vector<std::string> partial;
    scan(dir_, &complete, &partial);
    for (const std::string& p : partial)
      spdlog::warn("checkpoint {}: incomplete (no {} marker: the save was interrupted); skipped", p,
                   kMarker);
    if (!complete.empty()) {
      const auto marker = read_marker(complete.front().second);
      const auto it = marker.find("layout");
      if (it != marker.end() && it->second != layout) {
        plan = "!" + complete.front().second + ": checkpoint written with '" + it->second +
               "', this run is '" + layout +
               "'; resume with the same model, parallel layout and device (or start afresh "
               "in another run.name)";
      }
    }
    if (plan.empty())
      for (const auto& [step, path] : complete) plan += std::to_string(step) + " " + path + "\n";
  }
  plan = broadcast_string(*world_, plan, 0, kSite);
  if (!plan.empty() && plan[0] == '!') throw UserError(plan.substr(1));

  std::istringstream lines(plan);
  std::string line;
  int tried = 0;
  while (std::getline(lines, line)) {
    const size_t sp = line.find(' ');
    const int64_t step = std::stoll(line.substr(0, sp));
    const std::string path = line.substr(sp + 1);
    std::string message;
    bool ok = true;
    ++tried;
    try {
      *out = read_rank_checkpoint(path + "/" + rank_file_name(rank_));
      if (out->header["layout"] != layout || out->header["step"] != std::to_string(step) ||
          out->header["world"] != std::to_string(size_)) {
        throw UserError(path + "/" + rank_file_name(rank_) +
                        ": its header does not match the checkpoint's marker");
      }
    } catch (const std::exception& e) {
      ok = false;
      message = "rank " + std::to_string(rank_) + ": " + e.what();
    }
    if (agree(*world_, ok, &message, kSite)) {
      resumed_step_ = step;
      known_good_.insert(step);
      return step;
    }
    if (rank_ == 0) spdlog::warn("checkpoint {}: {}; trying an older one", path, message);
  }
  if (tried > 0 && rank_ == 0)
    spdlog::warn(
        "checkpoint: none of the {} complete checkpoint(s) in {} could be read; they are left "
        "as they are",
        tried, dir_);
  return -1;
}

void install_stop_signal_handlers() {
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") ||
                        std::getenv("PMI_RANK") || std::getenv("SLURM_PROCID");
  for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
    struct stat st {};
    const bool stat_ok = ::fstat(fd, &st) == 0;
    g_nonblock_on_stop[fd] = stat_ok &&
                             (launched || S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) &&
                             !S_ISREG(st.st_mode);
  }
  struct sigaction sa {};
  sa.sa_handler = taco_stop_handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int stop_signal() { return g_stop_signal.load(); }
void request_stop(int signo) { g_stop_signal.store(signo); }
void clear_stop_request() { g_stop_signal.store(0); }

}  // namespace taco
