// tools/bench/train_bench.py: for real on the tiny config with 2 CPU ranks (every field in the
// JSON, none's speedup 1, a finite loss, compressed wire bytes below the logical bytes), on a
// stand-in taco-train that writes the agreed metrics schema with known numbers (the median,
// the breakdown and the speedup computed from them), --rounds (interleaved, speedups within a
// round, the summary's median and range), the --plot re-render, and its one-line exit 2 on bad
// input.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>

#include "tests/support/test_util.h"

namespace {

using taco::test::run_command;
using taco::test::write_file;

std::string script() {
  return "python3 " + taco::test::source_dir() + "/tools/bench/train_bench.py";
}

// Prints "NAME.KEY VALUE" for every run and key of the report (repr of the value), and
// "missing NAME.KEY" for each expected key a run lacks, so the test reads plain lines.
const char* kReader = R"PY(
import json, sys
report = json.load(open(sys.argv[1]))
keys = ["name", "model", "tp", "codec", "status", "command", "command_line", "ms_per_step",
        "ms_mean", "tok_per_s", "mfu", "comm_ms", "comm_share", "staging_ms", "codec_ms",
        "breakdown_ms", "wire_bytes", "logical_bytes", "saved_bytes", "speedup", "loss",
        "val_loss", "step_ms", "measured_steps", "steps_done", "missing_fields"]
for r in report["runs"]:
    for k in keys:
        if k not in r:
            print("missing", r.get("name", "?") + "." + k)
    for k, v in r.items():
        if k == "breakdown_ms":
            for part, ms in v.items():
                print(r["name"] + ".part." + part, repr(ms))
        elif k == "step_ms":
            print(r["name"] + ".step_ms", " ".join(repr(x) for x in v))
        elif not isinstance(v, (dict, list)):
            print(r["name"] + "." + k, repr(v))
for row in report.get("summary", []):
    name = "summary.%s-tp%s-%s" % (row["model"], row["tp"], row["codec"])
    for k, v in row.items():
        print(name + "." + k, repr(v))
)PY";

std::map<std::string, std::string> read_report(const std::string& dir) {
  write_file(dir + "/read.py", kReader);
  const auto r = run_command("python3 " + dir + "/read.py " + dir + "/train_bench.json");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::map<std::string, std::string> values;
  std::istringstream lines(r.output);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t space = line.find(' ');
    if (line.rfind("missing ", 0) == 0) ADD_FAILURE() << line;
    if (space != std::string::npos) values[line.substr(0, space)] = line.substr(space + 1);
  }
  return values;
}

double num(const std::map<std::string, std::string>& v, const std::string& key) {
  const auto it = v.find(key);
  EXPECT_NE(it, v.end()) << key;
  if (it == v.end() || it->second == "None") return NAN;
  return std::stod(it->second);
}

TEST(TrainBench, RunsTheTinyConfigOnTwoCpuRanksAndReportsEveryField) {
  const std::string out = taco::test::scratch_dir("train_bench_tiny");
  const auto r = run_command(script() + " --build " + taco::test::binary_dir() +
                             " --models tiny --tp 2 --codecs none,taco --steps 4 --warmup 1" +
                             " --device cpu --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tiny-tp2-taco"), std::string::npos) << r.output;  // the table
  const auto v = read_report(out);
  for (const std::string run : {"tiny-tp2-none", "tiny-tp2-taco"}) {
    SCOPED_TRACE(run);
    EXPECT_EQ(v.at(run + ".status"), "'ok'");
    EXPECT_EQ(num(v, run + ".steps_done"), 4);
    EXPECT_EQ(num(v, run + ".measured_steps"), 3);
    const double loss = num(v, run + ".loss");
    // 4 steps from a near-uniform start on uniform random bytes: about ln(256) = 5.55.
    EXPECT_TRUE(std::isfinite(loss));
    EXPECT_NEAR(loss, std::log(256.0), 0.5);
    EXPECT_GT(num(v, run + ".ms_per_step"), 0);
    EXPECT_GT(num(v, run + ".tok_per_s"), 0);
    EXPECT_GT(num(v, run + ".comm_ms"), 0);  // tp = 2 talks every layer
    const double share = num(v, run + ".comm_share");
    EXPECT_TRUE(share > 0 && share < 1) << share;
    EXPECT_GT(num(v, run + ".logical_bytes"), 0);
    EXPECT_NE(v.at(run + ".command_line").find("parallel.backend=mpi"), std::string::npos);
  }
  EXPECT_EQ(num(v, "tiny-tp2-none.speedup"), 1.0);  // none_ms / none_ms
  EXPECT_GT(num(v, "tiny-tp2-taco.speedup"), 0);
  EXPECT_EQ(num(v, "tiny-tp2-none.wire_bytes"), num(v, "tiny-tp2-none.logical_bytes"));
  // One FP8 byte per fp32 element plus scales: ~0.27 of the logical bytes.
  EXPECT_LT(num(v, "tiny-tp2-taco.wire_bytes"), 0.5 * num(v, "tiny-tp2-taco.logical_bytes"));
  EXPECT_NE(v.at("tiny-tp2-taco.command_line").find("compression.default.codec=taco"),
            std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(out + "/train_bench.txt"));
}

// The codec-auto preset runs taco-train with codec: auto. Over a pretended slow link (the
// TACO_AUTO_LINK test hook, inherited by the ranks) auto chooses taco for every tp site, so the
// wire bytes are taco's: well below the logical bytes.
TEST(TrainBench, CodecAutoPresetRunsCodecAuto) {
  const std::string out = taco::test::scratch_dir("train_bench_codec_auto");
  const auto r =
      run_command("TACO_AUTO_LINK=1000:0.001 " + script() + " --build " + taco::test::binary_dir() +
                  " --models tiny --tp 2 --codecs codec-auto --steps 3 --warmup 1" +
                  " --device cpu --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto v = read_report(out);
  const std::string run = "tiny-tp2-codec-auto";
  EXPECT_EQ(v.at(run + ".status"), "'ok'");
  EXPECT_NE(v.at(run + ".command_line").find("compression.default.codec=auto"), std::string::npos);
  EXPECT_TRUE(std::isfinite(num(v, run + ".loss")));
  EXPECT_LT(num(v, run + ".wire_bytes"), 0.5 * num(v, run + ".logical_bytes"));
}

// A stand-in taco-train (rank 0 writes, as the trainer does) whose records each cover two
// steps with the agreed schema: step_ms per step, staging_ms, codec_ms, mfu. `none` steps take
// 100 + step ms with 60 ms of communication; `taco` 50 + step ms with 30 ms, 10 of it staging and
// 5 codec kernels. Under --rounds (a run name ending -rK), round K adds 10 (K - 1) ms to none's
// steps and 5 (K - 1) to taco's, a machine that drifts.
const char* kFakeTrainer = R"PY(#!/usr/bin/env python3
import json, os, re, sys
sets = dict(a.split("=", 1) for a in sys.argv[2:] if "=" in a)
if os.environ.get("OMPI_COMM_WORLD_RANK", "0") != "0":
    sys.exit(0)
folder = os.path.join(sets["run.dir"], sets["run.name"])
os.makedirs(folder, exist_ok=True)
taco = sets["compression.default.codec"] == "taco"
base, comm, staging, codec = (50, 30, 10, 5) if taco else (100, 60, 10, 0)
k = re.search(r"-r([0-9]+)$", sets["run.name"])
base += (int(k.group(1)) - 1) * (5 if taco else 10) if k else 0
with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
    for step in range(2, int(sets["train.steps"]) + 1, 2):
        times = [base + step - 1, base + step]
        f.write(json.dumps({"step": step, "steps": 2, "loss": 5.0 - 0.01 * step,
                            "step_ms": times, "ms": sum(times) / 2, "tok_per_s": 1.0,
                            "mfu": 0.25, "comm_ms": comm, "comm_share": comm * 2 / sum(times),
                            "staging_ms": staging, "codec_ms": codec,
                            "wire_bytes": 1000 if taco else 4000, "comm_bytes": 4000,
                            "saved_bytes": 3000 if taco else 0, "sites": {}}) + "\n")
    f.write(json.dumps({"step": step, "val_loss": 4.5}) + "\n")
)PY";

// OUT/build/taco-train: the stand-in trainer, executable.
void fake_build(const std::string& out) {
  std::filesystem::create_directories(out + "/build");
  write_file(out + "/build/taco-train", kFakeTrainer);
  std::filesystem::permissions(out + "/build/taco-train", std::filesystem::perms::owner_all);
}

TEST(TrainBench, ReadsTheAgreedMetricsSchema) {
  const std::string out = taco::test::scratch_dir("train_bench_schema");
  fake_build(out);
  const auto r =
      run_command(script() + " --build " + out + "/build --models tiny --tp 2" +
                  " --codecs none,taco --steps 8 --warmup 2 --device cpu --out " + out + "/report");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto v = read_report(out + "/report");
  // Steps 3..8 (after 2 warm-up steps): none 103..108, median 105.5; taco 53..58, median 55.5.
  EXPECT_EQ(num(v, "tiny-tp2-none.ms_per_step"), 105.5);
  EXPECT_EQ(num(v, "tiny-tp2-taco.ms_per_step"), 55.5);
  EXPECT_EQ(num(v, "tiny-tp2-none.measured_steps"), 6);
  EXPECT_DOUBLE_EQ(num(v, "tiny-tp2-taco.speedup"), 105.5 / 55.5);
  EXPECT_EQ(num(v, "tiny-tp2-none.speedup"), 1.0);
  // Breakdown of taco's mean step (55.5 ms over records 4, 6, 8): codec 5, staging 10,
  // wire 30 - 10 - 5 = 15, compute 55.5 - 30 = 25.5.
  EXPECT_EQ(num(v, "tiny-tp2-taco.part.codec"), 5);
  EXPECT_EQ(num(v, "tiny-tp2-taco.part.staging"), 10);
  EXPECT_EQ(num(v, "tiny-tp2-taco.part.wire"), 15);
  EXPECT_DOUBLE_EQ(num(v, "tiny-tp2-taco.part.compute"), 25.5);
  EXPECT_DOUBLE_EQ(num(v, "tiny-tp2-taco.comm_share"), 30 / 55.5);
  EXPECT_DOUBLE_EQ(num(v, "tiny-tp2-taco.tok_per_s"), 1024 / 0.0555);  // 8 x 128 tokens
  EXPECT_EQ(num(v, "tiny-tp2-taco.mfu"), 0.25);
  EXPECT_EQ(num(v, "tiny-tp2-taco.wire_bytes"), 1000);
  EXPECT_EQ(num(v, "tiny-tp2-taco.logical_bytes"), 4000);
  EXPECT_DOUBLE_EQ(num(v, "tiny-tp2-taco.loss"), 4.92);
  EXPECT_EQ(num(v, "tiny-tp2-taco.val_loss"), 4.5);
  EXPECT_EQ(v.at("tiny-tp2-taco.step_ms"), "51.0 52.0 53.0 54.0 55.0 56.0 57.0 58.0");
  EXPECT_EQ(r.output.find("has no"), std::string::npos) << "every field was there";

  // The plot re-renders from the JSON alone.
  const auto p =
      run_command(script() + " --plot " + out + "/report/train_bench.json " + out + "/again.png");
  EXPECT_EQ(p.exit_code, 0) << p.output;
  EXPECT_GT(std::filesystem::file_size(out + "/again.png"), 1000u);
}

TEST(TrainBench, RoundsInterleaveTheCodecsAndTakeSpeedupsWithinEachRound) {
  const std::string out = taco::test::scratch_dir("train_bench_rounds");
  fake_build(out);
  const auto r = run_command(script() + " --build " + out +
                             "/build --models tiny --tp 2 --codecs none,taco --steps 8 --warmup 2" +
                             " --rounds 3 --device cpu --out " + out + "/report");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Interleaved: none and taco of round 1, then of round 2, then of round 3.
  size_t at = 0;
  for (const char* name : {"tiny-tp2-none-r1", "tiny-tp2-taco-r1", "tiny-tp2-none-r2",
                           "tiny-tp2-taco-r2", "tiny-tp2-none-r3", "tiny-tp2-taco-r3"}) {
    const size_t here = r.output.find(std::string("# run ") + name + ":");
    ASSERT_NE(here, std::string::npos) << name << " did not run";
    EXPECT_GT(here + 1, at) << name << " ran out of order";
    at = here + 1;
  }
  const auto v = read_report(out + "/report");
  // Round K: none's steps 3..8 take 100 + 10 (K - 1) + step ms (median 105.5, 115.5, 125.5),
  // taco's 50 + 5 (K - 1) + step (55.5, 60.5, 65.5); each speedup against its own round's none.
  EXPECT_EQ(num(v, "tiny-tp2-none-r2.ms_per_step"), 115.5);
  EXPECT_DOUBLE_EQ(num(v, "tiny-tp2-taco-r2.speedup"), 115.5 / 60.5);
  EXPECT_DOUBLE_EQ(num(v, "tiny-tp2-taco-r3.speedup"), 125.5 / 65.5);
  EXPECT_EQ(v.at("tiny-tp2-taco-r3.baseline"), "'tiny-tp2-none-r3'");
  EXPECT_EQ(num(v, "summary.tiny-tp2-taco.rounds"), 3);
  EXPECT_EQ(num(v, "summary.tiny-tp2-none.ms_per_step_median"), 115.5);
  EXPECT_EQ(num(v, "summary.tiny-tp2-none.ms_per_step_min"), 105.5);
  EXPECT_EQ(num(v, "summary.tiny-tp2-none.ms_per_step_max"), 125.5);
  EXPECT_DOUBLE_EQ(num(v, "summary.tiny-tp2-taco.speedup_median"), 115.5 / 60.5);
  EXPECT_DOUBLE_EQ(num(v, "summary.tiny-tp2-taco.speedup_min"), 105.5 / 55.5);
  EXPECT_DOUBLE_EQ(num(v, "summary.tiny-tp2-taco.speedup_max"), 125.5 / 65.5);
  EXPECT_NE(r.output.find("over the rounds"), std::string::npos) << r.output;
}

void expect_bad_input(const std::string& args, const std::string& says) {
  const std::string out = taco::test::scratch_dir("train_bench_bad");
  const auto r = run_command(script() + " --build " + taco::test::binary_dir() +
                             " --models tiny --tp 2 --device cpu --out " + out + " " + args);
  EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "one line: " << r.output;
  EXPECT_NE(r.output.find(says), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out + "/runs")) << "nothing ran";
}

TEST(TrainBench, BadInputExitsTwoWithOneLine) {
  expect_bad_input("--codecs none,zstd", "unknown codec 'zstd'");
  expect_bad_input("--models 7b", "unknown model '7b'");
  expect_bad_input("--build /nonexistent/build", "no taco-train there");
  expect_bad_input("--backend nccl", "NCCL needs a GPU per rank");
  expect_bad_input("--tp 3", "n_head = 4, which tp must divide");
  expect_bad_input("--steps 5 --warmup 5", "must exceed --warmup");
  expect_bad_input("--rounds 0", "--rounds 0: expected at least 1");
  expect_bad_input("--pp 3", "n_layer = 4, which pp must divide");
  expect_bad_input("--pp 0", "--pp 0: expected at least 1");
}

// --pp P: TP x P ranks, parallel.pp = P, one micro-batch per stage (P x B x T tokens a step),
// the stages in the run's name.
TEST(TrainBench, PipelineStagesMultiplyTheRanksAndTheTokensOfAStep) {
  const std::string out = taco::test::scratch_dir("train_bench_pp");
  fake_build(out);
  const auto r = run_command(script() + " --build " + out +
                             "/build --models tiny --tp 1 --pp 2 --codecs none,taco --steps 8" +
                             " --warmup 2 --device cpu --out " + out + "/report");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto v = read_report(out + "/report");
  const std::string line = v.at("tiny-tp1-pp2-taco.command_line");
  EXPECT_NE(line.find("-np 2 "), std::string::npos) << line;
  EXPECT_NE(line.find("parallel.pp=2"), std::string::npos) << line;
  EXPECT_NE(line.find("train.global_batch_tokens=2048"), std::string::npos) << line;
  EXPECT_DOUBLE_EQ(num(v, "tiny-tp1-pp2-taco.tok_per_s"), 2048 / 0.0555);  // 2 x 8 x 128
  EXPECT_DOUBLE_EQ(num(v, "tiny-tp1-pp2-taco.speedup"), 105.5 / 55.5);
}

}  // namespace
