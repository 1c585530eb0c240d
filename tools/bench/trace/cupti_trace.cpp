// libtaco-cupti-trace.so: a timeline of every kernel, memcpy and memset a CUDA program runs, for
// finding where the GPU sits idle (no Nsight Systems on the GPU machines here). Preload it:
//
//   export TACO_TRACE_OUT=trace.txt
//   LD_PRELOAD=build/libtaco-cupti-trace.so build/taco-bench step --model 124m --steps 4
//   python3 tools/bench/trace/gpu_gaps.py trace.txt
//
// CUPTI's activity API records each operation's GPU start and end (ns); records are written as
// they arrive, one line each: "<start> <end> <K|C|S> <name>" (K kernel, with its demangled name;
// C memcpy, with its kind and bytes; S memset, with its bytes). Written at exit.
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

FILE* g_out = nullptr;
constexpr size_t kBufferBytes = size_t(8) << 20;

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  cuptiGetResultString(r, &text);
  std::fprintf(stderr, "taco-cupti-trace: %s failed: %s; no trace is written\n", what,
               text ? text : "unknown error");
}

std::string demangled(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : name;
  std::free(d);
  for (char& c : s)
    if (c == '\n' || c == '\t') c = ' ';
  return s.size() > 200 ? s.substr(0, 200) : s;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* r = nullptr;
  while (g_out && cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
    if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel9*>(r);
      std::fprintf(g_out, "%llu %llu K %s\n", (unsigned long long)k->start,
                   (unsigned long long)k->end, demangled(k->name).c_str());
    } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy5*>(r);
      std::fprintf(g_out, "%llu %llu C memcpy kind=%d bytes=%llu\n", (unsigned long long)m->start,
                   (unsigned long long)m->end, int(m->copyKind), (unsigned long long)m->bytes);
    } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(r);
      std::fprintf(g_out, "%llu %llu S memset bytes=%llu\n", (unsigned long long)m->start,
                   (unsigned long long)m->end, (unsigned long long)m->bytes);
    }
  }
  std::free(buffer);
}

__attribute__((constructor)) void start_trace() {
  const char* path = std::getenv("TACO_TRACE_OUT");
  if (!path) path = "trace.txt";
  g_out = std::fopen(path, "w");
  if (!g_out) {
    std::fprintf(stderr, "taco-cupti-trace: cannot write %s; no trace is written\n", path);
    return;
  }
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "register callbacks");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernel records");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enable memcpy records");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "enable memset records");
}

__attribute__((destructor)) void finish_trace() {
  if (!g_out) return;
  cuptiActivityFlushAll(1);
  std::fclose(g_out);
  g_out = nullptr;
}

}  // namespace
