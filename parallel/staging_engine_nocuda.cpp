// A build without CUDA has no staging: no pointer is a device pointer, so HostStagedCommunicator
// never calls the engine there, and every method that would move data throws taco::Error.
#include "parallel/staging_engine.h"

#include "kernels/check.h"

namespace taco {

struct StagingEngine::Cuda {};

StagingEngine::StagingEngine() = default;
StagingEngine::~StagingEngine() = default;

namespace {
[[noreturn]] void no_cuda() { throw Error("host staging in a build without CUDA", 1); }
}  // namespace

void* StagingEngine::host(int, size_t) { no_cuda(); }
void* StagingEngine::device(int, size_t) { no_cuda(); }
void StagingEngine::release(int) {}
Stream StagingEngine::up_stream() { no_cuda(); }
void StagingEngine::to_host(void*, const void*, size_t, Stream) { no_cuda(); }
void StagingEngine::to_device(void*, const void*, size_t) { no_cuda(); }
void StagingEngine::copy_on_device(void*, const void*, size_t, Stream) { no_cuda(); }
void StagingEngine::fill(void*, unsigned char, size_t) { no_cuda(); }
double StagingEngine::run(const staging::Plan&, const void*, void*, void*, const void*, Stream,
                          const std::function<void(size_t)>&) {
  no_cuda();
}
double StagingEngine::run_chained(const Stage&, const Stage&, Stream,
                                  const std::function<void(size_t, Stream)>&) {
  no_cuda();
}

bool is_device_pointer(const void*) { return false; }
void wait_for_stream(Stream) {}

}  // namespace taco
