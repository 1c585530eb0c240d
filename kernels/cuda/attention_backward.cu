// Causal flash-attention backward (FlashAttention-2 style) on bf16 tensor cores.
//
// With S = Q K^T * scale, P = exp(S - lse), dO the output gradient and D = rowsum(dO * O):
//   dV = P^T dO      dP = dO V^T      dS = P * (dP - D)      dK = scale * dS^T Q
//   dQ = scale * dS K
// Three launches:
//   prepare: D [B, NH, T] and a zeroed fp32 dq accumulator [B, T, C] in the caller's scratch;
//   main:    one block per (batch, head, tile of kBlockN keys); each warp owns 16 keys and keeps
//            their dK, dV rows in registers while the query tiles from the diagonal to T stream
//            through shared memory (cp.async, double-buffered). The block's dS^T tile goes
//            through shared memory so that dS K can be split by query rows, and is added into
//            the dq accumulator with fp32 atomics;
//   finish:  dq = bf16(scale * accumulator) into the q third of dqkv.
// The kernel works in the transposed frame (keys are MMA rows): S^T = K Q^T, dP^T = V dO^T.
#include <atomic>
#include <iterator>

#include "kernels/attention.h"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/attention_mma.cuh"

namespace taco::cuda {
namespace {

using namespace attention_detail;

template <int HS_, int BLOCK_M_, int NWARPS_, bool KV_IN_REGS_>
struct BackwardConfig {
  static constexpr int HS = HS_;
  static constexpr int BLOCK_M = BLOCK_M_;  // queries per shared-memory tile
  static constexpr int NWARPS = NWARPS_;
  static constexpr bool KV_IN_REGS = KV_IN_REGS_;  // keep this warp's K, V A-fragments in registers
  static constexpr int kThreads = 32 * NWARPS;
  static constexpr int kBlockN = 16 * NWARPS;  // keys per block
  static constexpr int kStride = smem_stride(HS);
  static constexpr int kDsStride = smem_stride(BLOCK_M);
  // dS K: the BLOCK_M x HS tile splits into kMt row tiles x kWarpsPerMt column slices of kDw.
  static constexpr int kMt = BLOCK_M / 16;
  static constexpr int kWarpsPerMt = NWARPS / kMt;
  static constexpr int kDw = HS / kWarpsPerMt;
  // K, V tiles; Q and dO tiles, two buffers each; dS^T; lse and D, two buffers each.
  static constexpr size_t kSmemBytes = size_t(2 * kBlockN + 4 * BLOCK_M) * kStride * 2 +
                                       size_t(kBlockN) * kDsStride * 2 + 4 * BLOCK_M * 4;
  static_assert(NWARPS % kMt == 0 && kDw % 16 == 0, "dS K work must split evenly over warps");
};

// hs 64: K, V fragments (32 registers) stay resident next to dK, dV (64).
// hs 128: dK, dV take 128 registers; K, V fragments are re-read and query tiles are 32 rows.
// Each head size has a few tile shapes (the first is the default, see attention_backward_select):
// more warps per block share one query tile among more keys, so Q and dO are read, and dQ is
// added with atomics, fewer times. Measured on an H200 (gpu_attention's timing test, 2026-12-02):
// B16 T1024 hs64: keys128/queries64 0.382 ms, keys64/queries64 0.400, keys128/queries32 0.448,
// keys64/queries32 0.445; B8 T2048 hs128: keys128/queries32 1.773 ms, keys64/queries32 1.840,
// keys64/queries16 2.007.

// Scratch layout: D [B, NH, T] fp32, then the dq accumulator [B, T, C] fp32 at 256-byte offset
// (cuDNN's backward uses the same two buffers).
size_t dvec_bytes(int B, int T, int NH) {
  return (size_t(B) * NH * T * sizeof(float) + 255) / 256 * 256;
}
float* dq_accumulator(void* scratch, int B, int T, int NH) {
  return reinterpret_cast<float*>(static_cast<unsigned char*>(scratch) + dvec_bytes(B, T, NH));
}

// D[b, h, t] = sum_d dout[b, t, h*HS + d] * out[b, t, h*HS + d]; zeroes the dq accumulator.
// One thread per 8 consecutive channels; the HS/8 lanes of one head reduce with shuffles.
template <int HS>
__global__ void attention_backward_prepare(float* __restrict__ dvec, float* __restrict__ dq_accum,
                                           const bf16_t* __restrict__ dout,
                                           const bf16_t* __restrict__ out, int T, int C, int NH,
                                           size_t num_chunks) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  float sum = 0.f;
  if (i < num_chunks) {
    const size_t e = i * 8;
    const uint4 a = *reinterpret_cast<const uint4*>(dout + e);
    const uint4 o = *reinterpret_cast<const uint4*>(out + e);
    const __nv_bfloat162* a2 = reinterpret_cast<const __nv_bfloat162*>(&a);
    const __nv_bfloat162* o2 = reinterpret_cast<const __nv_bfloat162*>(&o);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 af = __bfloat1622float2(a2[k]), of = __bfloat1622float2(o2[k]);
      sum = fmaf(af.x, of.x, sum);
      sum = fmaf(af.y, of.y, sum);
    }
    float4* z = reinterpret_cast<float4*>(dq_accum + e);
    z[0] = make_float4(0.f, 0.f, 0.f, 0.f);
    z[1] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  // Lanes i .. i + HS/8 - 1 of one head sit in one warp: HS/8 divides 32 and C.
#pragma unroll
  for (int off = HS / 16; off >= 1; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (i < num_chunks && i % (HS / 8) == 0) {
    const size_t row = i * 8 / C;  // b * T + t
    const int h = int(i * 8 % C) / HS;
    const size_t b = row / T, t = row % T;
    dvec[(b * NH + h) * T + t] = sum;
  }
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads)
    attention_backward_kernel(bf16_t* __restrict__ dqkv, float* __restrict__ dq_accum,
                              const bf16_t* __restrict__ dout, const bf16_t* __restrict__ qkv,
                              const float* __restrict__ lse, const float* __restrict__ dvec, int T,
                              int C, int NH, float scale, float scale_log2) {
  constexpr int HS = Cfg::HS, BM = Cfg::BLOCK_M, BN = Cfg::kBlockN;
  constexpr int S = Cfg::kStride, DSS = Cfg::kDsStride, QT = BM / 8, DT = HS / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16_t* k_s = reinterpret_cast<bf16_t*>(smem_raw);         // [BN][S]
  bf16_t* v_s = k_s + BN * S;                                // [BN][S]
  bf16_t* q_s = v_s + BN * S;                                // [2][BM][S]
  bf16_t* do_s = q_s + 2 * BM * S;                           // [2][BM][S]
  bf16_t* ds_s = do_s + 2 * BM * S;                          // [BN][DSS]: dS^T, keys x queries
  float* lse_s = reinterpret_cast<float*>(ds_s + BN * DSS);  // [2][BM]
  float* d_s = lse_s + 2 * BM;                               // [2][BM]

  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int n0 = int(blockIdx.y) * BN;  // key tile 0 has the most query tiles: it goes first
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;
  const int mi = lane / 8, r8 = lane % 8;
  const size_t row_stride = 3 * size_t(C);
  const bf16_t* q_g = qkv + size_t(b) * T * row_stride + h * HS;
  const bf16_t* k_g = q_g + C;
  const bf16_t* v_g = q_g + 2 * C;
  const bf16_t* do_g = dout + size_t(b) * T * C + h * HS;
  const float* lse_g = lse + size_t(bh) * T;
  const float* d_g = dvec + size_t(bh) * T;
  const int key_w0 = n0 + warp * 16;  // first key row of this warp

  const int m_first = n0 / BM;  // first query tile that sees any of these keys
  const int m_count = (T + BM - 1) / BM;

  auto load_query_tile = [&](int mt, int buf) {
    const int m0 = mt * BM;
    load_rows_async<BM, HS, Cfg::kThreads>(q_s + buf * BM * S, q_g + size_t(m0) * row_stride,
                                           T - m0, row_stride);
    load_rows_async<BM, HS, Cfg::kThreads>(do_s + buf * BM * S, do_g + size_t(m0) * C, T - m0, C);
    load_floats_async<BM, Cfg::kThreads>(lse_s + buf * BM, lse_g + m0, T - m0);
    load_floats_async<BM, Cfg::kThreads>(d_s + buf * BM, d_g + m0, T - m0);
  };

  load_rows_async<BN, HS, Cfg::kThreads>(k_s, k_g + size_t(n0) * row_stride, T - n0, row_stride);
  load_rows_async<BN, HS, Cfg::kThreads>(v_s, v_g + size_t(n0) * row_stride, T - n0, row_stride);
  load_query_tile(m_first, 0);
  cp_async_commit();

  // This warp's 16 rows of K and V as A fragments, one per 16 head dims, when kept resident.
  constexpr int kResident = Cfg::KV_IN_REGS ? HS / 16 : 1;
  uint32_t kf[kResident][4], vf[kResident][4];

  float dk[DT][4], dv[DT][4];
#pragma unroll
  for (int dt = 0; dt < DT; ++dt)
#pragma unroll
    for (int x = 0; x < 4; ++x) dk[dt][x] = dv[dt][x] = 0.f;

  for (int mt = m_first; mt < m_count; ++mt) {
    const int buf = (mt - m_first) & 1;
    if (mt + 1 < m_count) {
      load_query_tile(mt + 1, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    if constexpr (Cfg::KV_IN_REGS) {
      if (mt == m_first) {
#pragma unroll
        for (int kk = 0; kk < HS / 16; ++kk) {
          ldmatrix_x4(kf[kk], k_s + (warp * 16 + lane % 16) * S + kk * 16 + (lane / 16) * 8);
          ldmatrix_x4(vf[kk], v_s + (warp * 16 + lane % 16) * S + kk * 16 + (lane / 16) * 8);
        }
      }
    }

    const int m0 = mt * BM;
    const bf16_t* q_t = q_s + buf * BM * S;
    const bf16_t* do_t = do_s + buf * BM * S;
    const float* lse_t = lse_s + buf * BM;
    const float* d_t = d_s + buf * BM;

    // S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys x BM queries. Q and dO rows are
    // queries (the MMA's n), columns head dims (its k).
    float st[QT][4], dpt[QT][4];
#pragma unroll
    for (int qt = 0; qt < QT; ++qt)
#pragma unroll
      for (int x = 0; x < 4; ++x) st[qt][x] = dpt[qt][x] = 0.f;
#pragma unroll(Cfg::KV_IN_REGS ? HS / 16 : 2)
    for (int kk = 0; kk < HS / 16; ++kk) {
      uint32_t ka[4], va[4];
      if constexpr (Cfg::KV_IN_REGS) {
#pragma unroll
        for (int x = 0; x < 4; ++x) ka[x] = kf[kk][x], va[x] = vf[kk][x];
      } else {
        ldmatrix_x4(ka, k_s + (warp * 16 + lane % 16) * S + kk * 16 + (lane / 16) * 8);
        ldmatrix_x4(va, v_s + (warp * 16 + lane % 16) * S + kk * 16 + (lane / 16) * 8);
      }
#pragma unroll
      for (int qq = 0; qq < BM / 16; ++qq) {
        const int off = (qq * 16 + r8 + 8 * (mi >> 1)) * S + kk * 16 + 8 * (mi & 1);
        uint32_t qb[4], ob[4];
        ldmatrix_x4(qb, q_t + off);
        mma_16816(st[2 * qq], ka, qb[0], qb[1]);
        mma_16816(st[2 * qq + 1], ka, qb[2], qb[3]);
        ldmatrix_x4(ob, do_t + off);
        mma_16816(dpt[2 * qq], va, ob[0], ob[1]);
        mma_16816(dpt[2 * qq + 1], va, ob[2], ob[3]);
      }
    }

    // P^T = 2^(S^T * scale * log2 e - lse * log2 e), zero where key > query or query >= T;
    // dS^T = P^T * (dP^T - D). Masked entries are selected away, never multiplied, since their
    // exponent is unbounded.
    const bool need_mask = key_w0 + 15 > m0 || m0 + BM > T;
#pragma unroll
    for (int qt = 0; qt < QT; ++qt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int ql = qt * 8 + 2 * t4 + (e & 1);
        const int query = m0 + ql, key = key_w0 + g + 8 * (e >> 1);
        float p = fast_exp2(fmaf(st[qt][e], scale_log2, -lse_t[ql] * kLog2e));
        if (need_mask && (key > query || query >= T)) p = 0.f;
        st[qt][e] = p;
        dpt[qt][e] = p * (dpt[qt][e] - d_t[ql]);
      }
    }

    // dV += P^T dO and dK += dS^T Q (scale applied at the end): the A operands come from the
    // accumulators; dO and Q rows are queries (the MMA's k), so B fragments come transposed.
#pragma unroll
    for (int kq = 0; kq < BM / 16; ++kq) {
      uint32_t pa[4];
      accumulators_to_a(pa, st[2 * kq], st[2 * kq + 1]);
#pragma unroll
      for (int dn = 0; dn < HS / 16; ++dn) {
        uint32_t ob[4];
        ldmatrix_x4_trans(ob, do_t + (kq * 16 + r8 + 8 * (mi & 1)) * S + dn * 16 + 8 * (mi >> 1));
        mma_16816(dv[2 * dn], pa, ob[0], ob[1]);
        mma_16816(dv[2 * dn + 1], pa, ob[2], ob[3]);
      }
    }
#pragma unroll
    for (int kq = 0; kq < BM / 16; ++kq) {
      uint32_t dsa[4];
      accumulators_to_a(dsa, dpt[2 * kq], dpt[2 * kq + 1]);
#pragma unroll
      for (int dn = 0; dn < HS / 16; ++dn) {
        uint32_t qb[4];
        ldmatrix_x4_trans(qb, q_t + (kq * 16 + r8 + 8 * (mi & 1)) * S + dn * 16 + 8 * (mi >> 1));
        mma_16816(dk[2 * dn], dsa, qb[0], qb[1]);
        mma_16816(dk[2 * dn + 1], dsa, qb[2], qb[3]);
      }
    }

    // Stash dS^T (bf16, the same values dK used) for the block-wide dS K product.
#pragma unroll
    for (int qt = 0; qt < QT; ++qt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
        *reinterpret_cast<uint32_t*>(ds_s + (warp * 16 + g + 8 * hh) * DSS + qt * 8 + 2 * t4) =
            pack_bf16(dpt[qt][2 * hh], dpt[qt][2 * hh + 1]);
    __syncthreads();

    // dQ tile part = dS K over this block's keys: warp -> query rows mw*16.., head dims dw*kDw..
    // A = dS [query][key] is stored as dS^T, and K rows are keys (the MMA's k): both transposed.
    {
      constexpr int DW = Cfg::kDw;
      const int mw = warp % Cfg::kMt, dw = warp / Cfg::kMt;
      float dq[DW / 8][4];
#pragma unroll
      for (int dt = 0; dt < DW / 8; ++dt)
#pragma unroll
        for (int x = 0; x < 4; ++x) dq[dt][x] = 0.f;
#pragma unroll
      for (int kn = 0; kn < BN / 16; ++kn) {
        uint32_t dsq[4];
        ldmatrix_x4_trans(dsq,
                          ds_s + (kn * 16 + r8 + 8 * (mi >> 1)) * DSS + mw * 16 + 8 * (mi & 1));
#pragma unroll
        for (int dn = 0; dn < DW / 16; ++dn) {
          uint32_t kb[4];
          ldmatrix_x4_trans(
              kb, k_s + (kn * 16 + r8 + 8 * (mi & 1)) * S + dw * DW + dn * 16 + 8 * (mi >> 1));
          mma_16816(dq[2 * dn], dsq, kb[0], kb[1]);
          mma_16816(dq[2 * dn + 1], dsq, kb[2], kb[3]);
        }
      }
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int query = m0 + mw * 16 + g + 8 * hh;
        if (query < T) {
          float* row = dq_accum + (size_t(b) * T + query) * C + h * HS + dw * DW + 2 * t4;
#pragma unroll
          for (int dt = 0; dt < DW / 8; ++dt) {
#if __CUDA_ARCH__ >= 900
            atomicAdd(reinterpret_cast<float2*>(row + dt * 8),
                      make_float2(dq[dt][2 * hh], dq[dt][2 * hh + 1]));
#else
            atomicAdd(row + dt * 8, dq[dt][2 * hh]);
            atomicAdd(row + dt * 8 + 1, dq[dt][2 * hh + 1]);
#endif
          }
        }
      }
    }
    __syncthreads();  // the Q/dO buffer and dS^T are overwritten next
  }

  // dK (scaled) and dV as bf16, staged in this warp's own rows of the K and V tiles (free after
  // the loop's last barrier) so the global writes are whole 16-byte chunks.
  bf16_t* dk_stage = k_s + warp * 16 * S;
  bf16_t* dv_stage = v_s + warp * 16 * S;
#pragma unroll
  for (int dt = 0; dt < DT; ++dt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int off = (g + 8 * hh) * S + dt * 8 + 2 * t4;
      *reinterpret_cast<uint32_t*>(dk_stage + off) =
          pack_bf16(dk[dt][2 * hh] * scale, dk[dt][2 * hh + 1] * scale);
      *reinterpret_cast<uint32_t*>(dv_stage + off) = pack_bf16(dv[dt][2 * hh], dv[dt][2 * hh + 1]);
    }
  __syncwarp();
  bf16_t* dk_g = dqkv + (size_t(b) * T + key_w0) * row_stride + C + h * HS;
  store_rows_warp<16, HS>(dk_g, row_stride, dk_stage, T - key_w0, lane);
  store_rows_warp<16, HS>(dk_g + C, row_stride, dv_stage, T - key_w0, lane);
}

// dqkv[b, t, 0:C] = bf16(scale * dq_accum[b, t, :]), 8 channels per thread.
__global__ void attention_backward_finish(bf16_t* __restrict__ dqkv,
                                          const float* __restrict__ dq_accum, int C, float scale,
                                          size_t num_chunks) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= num_chunks) return;
  const size_t e = i * 8, row = e / C, col = e % C;
  const float4 a = reinterpret_cast<const float4*>(dq_accum + e)[0];
  const float4 c = reinterpret_cast<const float4*>(dq_accum + e)[1];
  uint4 packed;
  packed.x = pack_bf16(a.x * scale, a.y * scale);
  packed.y = pack_bf16(a.z * scale, a.w * scale);
  packed.z = pack_bf16(c.x * scale, c.y * scale);
  packed.w = pack_bf16(c.z * scale, c.w * scale);
  *reinterpret_cast<uint4*>(dqkv + row * 3 * C + col) = packed;
}

template <class Cfg>
void launch_backward(bf16_t* dqkv, const bf16_t* dout, const bf16_t* qkv, const bf16_t* out,
                     const float* lse, int B, int T, int C, int NH, void* scratch,
                     cudaStream_t stream) {
  float* dvec = static_cast<float*>(scratch);
  float* dq_accum = dq_accumulator(scratch, B, T, NH);
  const float scale = 1.f / sqrtf(float(Cfg::HS));
  const size_t num_chunks = size_t(B) * T * C / 8;
  const int threads = 256;
  const unsigned elementwise_blocks = unsigned((num_chunks + threads - 1) / threads);

  attention_backward_prepare<Cfg::HS>
      <<<elementwise_blocks, threads, 0, stream>>>(dvec, dq_accum, dout, out, T, C, NH, num_chunks);
  TACO_LAUNCH_OK();

  auto kernel = attention_backward_kernel<Cfg>;
  TACO_CUDA_OK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(Cfg::kSmemBytes)));
  const dim3 grid(B * NH, (T + Cfg::kBlockN - 1) / Cfg::kBlockN);
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(dqkv, dq_accum, dout, qkv, lse, dvec, T,
                                                           C, NH, scale, scale * kLog2e);
  TACO_LAUNCH_OK();

  attention_backward_finish<<<elementwise_blocks, threads, 0, stream>>>(dqkv, dq_accum, C, scale,
                                                                        num_chunks);
  TACO_LAUNCH_OK();
}

}  // namespace

size_t attention_backward_scratch_bytes(int B, int T, int C, int NH) {
  checked_head_size("attention_backward_scratch_bytes", B, T, C, NH);
  return dvec_bytes(B, T, NH) + size_t(B) * T * C * sizeof(float);
}

namespace {

using Launcher = void (*)(bf16_t*, const bf16_t*, const bf16_t*, const bf16_t*, const float*, int,
                          int, int, int, void*, cudaStream_t);
struct Variant {
  const char* name;
  Launcher launch;
};
template <class Cfg>
constexpr Variant variant(const char* name) {
  return {name, &launch_backward<Cfg>};
}

constexpr Variant kVariants64[] = {
    variant<BackwardConfig<64, 64, 8, true>>("hs64 keys128 queries64"),
    variant<BackwardConfig<64, 64, 4, true>>("hs64 keys64 queries64"),
    variant<BackwardConfig<64, 32, 8, true>>("hs64 keys128 queries32"),
    variant<BackwardConfig<64, 32, 4, true>>("hs64 keys64 queries32"),
};
constexpr Variant kVariants128[] = {
    variant<BackwardConfig<128, 32, 8, false>>("hs128 keys128 queries32"),
    variant<BackwardConfig<128, 32, 4, false>>("hs128 keys64 queries32"),
    variant<BackwardConfig<128, 16, 4, false>>("hs128 keys64 queries16"),
};
std::atomic<int> g_selected64{0}, g_selected128{0};

int variant_count(int hs) {
  return hs == 64 ? int(std::size(kVariants64)) : int(std::size(kVariants128));
}
const Variant& variant_at(int hs, int index) {
  return hs == 64 ? kVariants64[index] : kVariants128[index];
}

}  // namespace

int attention_backward_variants(int head_size) {
  TACO_CHECK(head_size == 64 || head_size == 128,
             "attention_backward_variants: head size 64 or 128");
  return variant_count(head_size);
}

const char* attention_backward_variant_name(int head_size, int index) {
  TACO_CHECK(index >= 0 && index < attention_backward_variants(head_size),
             "attention_backward_variant_name: no such variant");
  return variant_at(head_size, index).name;
}

void attention_backward_select(int head_size, int index) {
  TACO_CHECK(index >= 0 && index < attention_backward_variants(head_size),
             "attention_backward_select: no such variant");
  (head_size == 64 ? g_selected64 : g_selected128).store(index);
}

void attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                        const float* lse, int B, int T, int C, int NH, void* scratch,
                        Stream stream) {
  const int hs = checked_head_size("attention_backward", B, T, C, NH);
  TACO_CHECK(detail::aligned16(dqkv) && detail::aligned16(dout) && detail::aligned16(qkv) &&
                 detail::aligned16(out) && detail::aligned16(lse) && detail::aligned16(scratch),
             "attention_backward: all pointers must be 16-byte aligned");
  if (detail::cudnn_attention_backward(dqkv, dout, qkv, out, lse, B, T, C, NH,
                                       static_cast<float*>(scratch),
                                       dq_accumulator(scratch, B, T, NH), stream))
    return;
  const int index = (hs == 64 ? g_selected64 : g_selected128).load();
  variant_at(hs, index).launch(detail::nv(dqkv), detail::nv(dout), detail::nv(qkv), detail::nv(out),
                               lse, B, T, C, NH, scratch, stream);
}

}  // namespace taco::cuda
