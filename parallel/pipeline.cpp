#include "parallel/pipeline.h"

#include <algorithm>

#include "kernels/check.h"

namespace taco {

namespace {

// The sends and receives between neighbouring stages. A stage's boundary tensors are asked for
// only where they cross a link, so a single stage never needs them.
struct Links {
  SiteComm* pp;
  int stage, stages;
  const PipelineStage& st;
  bool first() const { return stage == 0; }
  bool last() const { return stage == stages - 1; }
  void recv_forward(int slot) const {
    if (!first()) pp->recv(st.input(slot), stage - 1, Site::pp_act, -1);
  }
  void send_forward(int slot) const {
    if (!last()) pp->send(st.output(slot), stage + 1, Site::pp_act, -1);
  }
  void recv_backward() const {
    if (!last()) pp->recv(st.grad(), stage + 1, Site::pp_grad, -1);
  }
  void send_backward() const {
    if (!first()) pp->send(st.grad(), stage - 1, Site::pp_grad, -1);
  }
  // Send an activation forward and receive a gradient from the same next stage.
  void send_forward_recv_backward(int slot) const {
    if (!last())
      pp->send_recv(st.output(slot), stage + 1, Site::pp_act, st.grad(), stage + 1, Site::pp_grad);
  }
  // Send a gradient back and receive the next activation from the same previous stage.
  void send_backward_recv_forward(int slot) const {
    if (!first())
      pp->send_recv(st.grad(), stage - 1, Site::pp_grad, st.input(slot), stage - 1, Site::pp_act);
  }
};

}  // namespace

void run_1f1b(SiteComm* pp, int micro_batches, int slots, const PipelineStage& stage) {
  const int P = pp ? pp->size() : 1, s = pp ? pp->rank() : 0, M = micro_batches;
  const Links links{pp, s, P, stage};
  TACO_CHECK(slots >= std::min(P - s, M),
             "1F1B needs an activation slot per micro-batch in flight");
  const int warmup = std::min(P - s - 1, M);
  const int steady = M - warmup;
  auto slot = [&](int m) { return m % slots; };

  for (int m = 0; m < warmup; ++m) {
    links.recv_forward(slot(m));
    stage.forward(m, slot(m));
    links.send_forward(slot(m));
  }
  if (steady > 0) links.recv_forward(slot(warmup));
  for (int i = 0; i < steady; ++i) {
    const int fm = warmup + i, bm = i;
    stage.forward(fm, slot(fm));
    links.send_forward_recv_backward(slot(fm));
    stage.backward(bm, slot(bm));
    if (i + 1 == steady)
      links.send_backward();
    else
      links.send_backward_recv_forward(slot(fm + 1));
  }
  for (int bm = steady; bm < M; ++bm) {
    links.recv_backward();
    stage.backward(bm, slot(bm));
    links.send_backward();
  }
}

void run_forward_only(SiteComm* pp, int micro_batches, const PipelineStage& stage) {
  const int P = pp ? pp->size() : 1, s = pp ? pp->rank() : 0;
  const Links links{pp, s, P, stage};
  for (int m = 0; m < micro_batches; ++m) {
    links.recv_forward(0);
    stage.forward(m, 0);
    links.send_forward(0);
  }
}

}  // namespace taco
