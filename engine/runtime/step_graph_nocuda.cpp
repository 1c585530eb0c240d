// CPU-only build: no graphs; a step runs its body as it is (engine/runtime/step_graph.h).
#include "engine/runtime/step_graph.h"

namespace taco {

Stream create_compute_stream() { return nullptr; }
void destroy_compute_stream(Stream) {}
void stream_synchronize(Stream) {}

StepGraph::~StepGraph() = default;

void StepGraph::run(const std::function<void()>& body) { body(); }

bool StepGraph::capture(const std::function<void()>&) { return false; }
void StepGraph::release() {}

}  // namespace taco
