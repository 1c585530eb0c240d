// Token + position embeddings on bf16 (math in kernels/embedding.h).
//
// Forward: one thread per 8 channels of one token (16-byte loads of the wte and wpe rows).
// Backward, deterministic without float atomics:
//   1. key[n] = tokens[n] - vocab_start (V for tokens of other shards), row[n] = n;
//   2. a stable radix sort by key puts each vocab row's tokens together, in token order;
//   3. the first thread of each run of equal keys (per 8 channels) sums its dout rows in that
//      order in fp32 and adds the sum into dwte once.
// dwpe[t] sums dout[b, t] over b in order, one thread per 8 channels of t.
#include <cub/device/device_radix_sort.cuh>

#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/embedding.h"

namespace taco::cuda {
namespace {

using detail::ceil_div;
using detail::load;
using detail::nv;
using detail::nv_bf16;
using detail::store;

constexpr int kThreads = 256;
constexpr int kInFlight = 8;

// kTokens: out = wte[token] (+ wpe[t]); otherwise out += wpe[t].
template <bool kTokens>
__global__ void embedding_forward_kernel(nv_bf16* out, const int32_t* tokens, const nv_bf16* wte,
                                         const nv_bf16* wpe, int N, int T, int C, int vocab_start,
                                         int V) {
  const int groups = C / 8;
  const size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= size_t(N) * groups) return;
  const int n = int(idx / groups);
  const int c = int(idx % groups) * 8;
  float acc[8];
  if constexpr (kTokens) {
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = 0.f;
    const int row = tokens[n] - vocab_start;
    if (row >= 0 && row < V) load<8>(acc, wte + size_t(row) * C + c);
  } else {
    load<8>(acc, out + size_t(n) * C + c);
  }
  if (wpe) {
    float p[8];
    load<8>(p, wpe + size_t(n % T) * C + c);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] += p[e];
  }
  store<8>(out + size_t(n) * C + c, acc);
}

__global__ void sort_keys_kernel(uint32_t* keys, int32_t* rows, const int32_t* tokens, int N,
                                 int vocab_start, int V) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const int row = tokens[n] - vocab_start;
  keys[n] = (row >= 0 && row < V) ? uint32_t(row) : uint32_t(V);
  rows[n] = n;
}

// keys/rows: sorted by key, stable. One thread per (sorted position i, 8 channels); only the first
// position of each run of equal keys works.
__global__ void wte_backward_kernel(nv_bf16* dwte, const nv_bf16* dout, const uint32_t* keys,
                                    const int32_t* rows, int N, int C, int V) {
  const int groups = C / 8;
  const size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= size_t(N) * groups) return;
  const int i = int(idx / groups);
  const int c = int(idx % groups) * 8;
  const uint32_t key = keys[i];
  if (key >= uint32_t(V)) return;           // another shard's token
  if (i > 0 && keys[i - 1] == key) return;  // not the first of its run
  int end = i + 1;
  while (end < N && keys[end] == key) ++end;

  const nv_bf16* src = dout + c;
  float acc[8] = {};
  int j = i;
  // kInFlight rows loaded per step (the most frequent token's run bounds the kernel's time);
  // they are still added in token order.
  for (; j + kInFlight <= end; j += kInFlight) {
    float x[kInFlight][8];
#pragma unroll
    for (int r = 0; r < kInFlight; ++r) load<8>(x[r], src + size_t(rows[j + r]) * C);
#pragma unroll
    for (int r = 0; r < kInFlight; ++r)
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] += x[r][e];
  }
  for (; j < end; ++j) {
    float x[8];
    load<8>(x, src + size_t(rows[j]) * C);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] += x[e];
  }
  nv_bf16* dst = dwte + size_t(key) * C + c;
  float cur[8];
  load<8>(cur, dst);
#pragma unroll
  for (int e = 0; e < 8; ++e) cur[e] += acc[e];
  store<8>(dst, cur);
}

__global__ void wpe_backward_kernel(nv_bf16* dwpe, const nv_bf16* dout, int B, int T, int C) {
  const int groups = C / 8;
  const size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= size_t(T) * groups) return;
  const int t = int(idx / groups);
  const int c = int(idx % groups) * 8;
  float acc[8] = {};
  for (int b = 0; b < B; ++b) {
    float x[8];
    load<8>(x, dout + (size_t(b) * T + t) * C + c);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] += x[e];
  }
  float cur[8];
  load<8>(cur, dwpe + size_t(t) * C + c);
#pragma unroll
  for (int e = 0; e < 8; ++e) cur[e] += acc[e];
  store<8>(dwpe + size_t(t) * C + c, cur);
}

void check_channels(const char* op, int C, const void* p0, const void* p1, const void* p2) {
  TACO_CHECK(C > 0 && C % 8 == 0, std::string(op) + ": C=" + std::to_string(C) +
                                      " must be a positive multiple of 8 (16-byte row vectors)");
  for (const void* p : {p0, p1, p2})
    TACO_CHECK(!p || detail::aligned16(p), std::string(op) + ": pointers must be 16-byte aligned");
}

size_t align256(size_t bytes) { return (bytes + 255) & ~size_t(255); }

}  // namespace

void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B,
                       int T, int C, int vocab_start, int V, Stream stream) {
  check_channels("embedding_forward", C, out, wte, wpe);
  const size_t N = size_t(B) * T;
  if (N == 0) return;
  const size_t threads = N * (C / 8);
  embedding_forward_kernel<true><<<unsigned(ceil_div(threads, kThreads)), kThreads, 0, stream>>>(
      nv(out), tokens, nv(wte), nv(wpe), int(N), T, C, vocab_start, V);
  TACO_LAUNCH_OK();
}

void position_embedding_forward(bf16* out, const bf16* wpe, int B, int T, int C, Stream stream) {
  check_channels("position_embedding_forward", C, out, wpe, nullptr);
  const size_t N = size_t(B) * T;
  if (N == 0) return;
  const size_t threads = N * (C / 8);
  embedding_forward_kernel<false><<<unsigned(ceil_div(threads, kThreads)), kThreads, 0, stream>>>(
      nv(out), nullptr, nullptr, nv(wpe), int(N), T, C, 0, 0);
  TACO_LAUNCH_OK();
}

void embedding_backward(bf16* dwte, bf16* dwpe, const bf16* dout, const int32_t* tokens, int B,
                        int T, int C, int vocab_start, int V, Stream stream) {
  check_channels("embedding_backward", C, dwte, dwpe, dout);
  const int N = B * T;
  if (N == 0) return;
  if (dwpe) {
    const size_t threads = size_t(T) * (C / 8);
    wpe_backward_kernel<<<unsigned(ceil_div(threads, kThreads)), kThreads, 0, stream>>>(
        nv(dwpe), nv(dout), B, T, C);
    TACO_LAUNCH_OK();
  }
  if (!dwte || V <= 0) return;

  // Keys take values 0..V (V marks other shards): sort only the bits they use.
  int end_bit = 1;
  while (end_bit < 32 && (uint64_t(1) << end_bit) <= uint64_t(V)) ++end_bit;
  size_t sort_bytes = 0;
  TACO_CUDA_OK(cub::DeviceRadixSort::SortPairs(
      nullptr, sort_bytes, static_cast<uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<int32_t*>(nullptr), static_cast<int32_t*>(nullptr), N, 0, end_bit, stream));
  const size_t array_bytes = align256(size_t(N) * 4);
  char* base = static_cast<char*>(detail::scratch(stream, 4 * array_bytes + sort_bytes));
  auto* keys_in = reinterpret_cast<uint32_t*>(base);
  auto* keys_out = reinterpret_cast<uint32_t*>(base + array_bytes);
  auto* rows_in = reinterpret_cast<int32_t*>(base + 2 * array_bytes);
  auto* rows_out = reinterpret_cast<int32_t*>(base + 3 * array_bytes);
  void* sort_temp = base + 4 * array_bytes;

  sort_keys_kernel<<<unsigned(ceil_div(N, kThreads)), kThreads, 0, stream>>>(
      keys_in, rows_in, tokens, N, vocab_start, V);
  TACO_LAUNCH_OK();
  TACO_CUDA_OK(cub::DeviceRadixSort::SortPairs(sort_temp, sort_bytes, keys_in, keys_out, rows_in,
                                               rows_out, N, 0, end_bit, stream));
  const size_t threads = size_t(N) * (C / 8);
  wte_backward_kernel<<<unsigned(ceil_div(threads, kThreads)), kThreads, 0, stream>>>(
      nv(dwte), nv(dout), keys_out, rows_out, N, C, V);
  TACO_LAUNCH_OK();
}

}  // namespace taco::cuda
