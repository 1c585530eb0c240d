// Causal flash-attention forward (FlashAttention-2 style) on bf16 tensor cores.
//
// One block computes kBlockM query rows of one (batch, head); each warp owns 16*WM of them.
// Key/value tiles of BLOCK_N rows stream through shared memory (cp.async, double-buffered) from
// key 0 up to the block's last query, so tiles wholly above the diagonal are never touched.
// Per tile and warp:
//   S = Q K^T                      (MMA; Q fragments stay in registers for the whole block)
//   m' = max(m, rowmax(S) * scale * log2 e),  P = 2^(S * scale * log2 e - m')
//   l  = l * 2^(m - m') + rowsum(P),          O = O * 2^(m - m') + P V   (P rounded to bf16)
// and at the end out = O / l, lse = (m + log2 l) * ln 2.
#include "kernels/attention.h"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/attention_mma.cuh"

namespace taco::cuda {
namespace {

using namespace attention_detail;

template <int HS_, int WM_, int NWARPS_, int BLOCK_N_>
struct ForwardConfig {
  static constexpr int HS = HS_;  // head size
  static constexpr int WM = WM_;  // 16-row MMA tiles of queries per warp
  static constexpr int NWARPS = NWARPS_;
  static constexpr int BLOCK_N = BLOCK_N_;  // keys per shared-memory tile
  static constexpr int kThreads = 32 * NWARPS;
  static constexpr int kBlockM = 16 * WM * NWARPS;  // queries per block
  static constexpr int kStride = smem_stride(HS);
  // Q tile, then K and V tiles, two buffers each.
  static constexpr size_t kSmemBytes = size_t(kBlockM + 4 * BLOCK_N) * kStride * sizeof(bf16_t);
  static_assert(HS % 16 == 0 && BLOCK_N % 16 == 0, "tiles are made of 16x16 MMA steps");
};

// hs 64: 32 query rows per warp halve the shared-memory reads of K and V per MMA.
// hs 128: 16 rows per warp keep O, S and the Q fragments within ~170 registers.
using Forward64 = ForwardConfig<64, 2, 4, 64>;
using Forward128 = ForwardConfig<128, 1, 4, 64>;

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads)
    attention_forward_kernel(bf16_t* __restrict__ out, float* __restrict__ lse,
                             const bf16_t* __restrict__ qkv, int T, int C, int NH,
                             float scale_log2) {
  constexpr int HS = Cfg::HS, WM = Cfg::WM, BN = Cfg::BLOCK_N, BM = Cfg::kBlockM;
  constexpr int S = Cfg::kStride, NT = BN / 8, DT = HS / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16_t* q_s = reinterpret_cast<bf16_t*>(smem_raw);  // [BM][S]
  bf16_t* k_s = q_s + BM * S;                         // [2][BN][S]
  bf16_t* v_s = k_s + 2 * BN * S;                     // [2][BN][S]

  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int q0 = (int(gridDim.y) - 1 - int(blockIdx.y)) * BM;  // longest causal rows first
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;   // MMA group and thread in group
  const int mi = lane / 8, r8 = lane % 8;  // ldmatrix matrix index and row
  const size_t row_stride = 3 * size_t(C);
  const bf16_t* q_g = qkv + size_t(b) * T * row_stride + h * HS;
  const bf16_t* k_g = q_g + C;
  const bf16_t* v_g = q_g + 2 * C;

  const int q_end = min(q0 + BM, T);
  const int num_k_tiles = (q_end + BN - 1) / BN;
  const int warp_q0 = q0 + warp * 16 * WM;  // first query row of this warp

  load_rows_async<BM, HS, Cfg::kThreads>(q_s, q_g + size_t(q0) * row_stride, q_end - q0,
                                         row_stride);
  load_rows_async<BN, HS, Cfg::kThreads>(k_s, k_g, T, row_stride);
  load_rows_async<BN, HS, Cfg::kThreads>(v_s, v_g, T, row_stride);
  cp_async_commit();

  uint32_t qf[WM][HS / 16][4];
  float o[WM][DT][4];
  float m_run[WM][2], l_run[WM][2];  // per row g and g+8 of each MMA tile
#pragma unroll
  for (int m = 0; m < WM; ++m) {
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) o[m][dt][0] = o[m][dt][1] = o[m][dt][2] = o[m][dt][3] = 0.f;
    m_run[m][0] = m_run[m][1] = -INFINITY;
    l_run[m][0] = l_run[m][1] = 0.f;
  }

  for (int j = 0; j < num_k_tiles; ++j) {
    const int n0 = j * BN;
    if (j + 1 < num_k_tiles) {
      const int n1 = n0 + BN, buf = (j + 1) & 1;
      load_rows_async<BN, HS, Cfg::kThreads>(k_s + buf * BN * S, k_g + size_t(n1) * row_stride,
                                             T - n1, row_stride);
      load_rows_async<BN, HS, Cfg::kThreads>(v_s + buf * BN * S, v_g + size_t(n1) * row_stride,
                                             T - n1, row_stride);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    if (j == 0) {
#pragma unroll
      for (int m = 0; m < WM; ++m)
#pragma unroll
        for (int kk = 0; kk < HS / 16; ++kk)
          ldmatrix_x4(qf[m][kk],
                      q_s + (warp * 16 * WM + m * 16 + lane % 16) * S + kk * 16 + (lane / 16) * 8);
    }

    // Skip a tile whose keys all lie after every query of this warp, and warps past T.
    if (warp_q0 < T && n0 <= warp_q0 + 16 * WM - 1) {
      const bf16_t* k_t = k_s + (j & 1) * BN * S;
      const bf16_t* v_t = v_s + (j & 1) * BN * S;

      float s[WM][NT][4];
#pragma unroll
      for (int m = 0; m < WM; ++m)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) s[m][nt][0] = s[m][nt][1] = s[m][nt][2] = s[m][nt][3] = 0.f;

          // S = Q K^T: K rows are keys (the MMA's n), columns head dims (its k).
#pragma unroll
      for (int kk = 0; kk < HS / 16; ++kk) {
#pragma unroll
        for (int nn = 0; nn < BN / 16; ++nn) {
          uint32_t kb[4];
          ldmatrix_x4(kb, k_t + (nn * 16 + r8 + 8 * (mi >> 1)) * S + kk * 16 + 8 * (mi & 1));
#pragma unroll
          for (int m = 0; m < WM; ++m) {
            mma_16816(s[m][2 * nn], qf[m][kk], kb[0], kb[1]);
            mma_16816(s[m][2 * nn + 1], qf[m][kk], kb[2], kb[3]);
          }
        }
      }

      // Causal mask, only on tiles that reach past this warp's first query.
      if (n0 + BN - 1 > warp_q0) {
#pragma unroll
        for (int m = 0; m < WM; ++m)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int query = warp_q0 + m * 16 + g + 8 * (e >> 1);
              const int key = n0 + nt * 8 + 2 * t4 + (e & 1);
              if (key > query) s[m][nt][e] = -INFINITY;
            }
      }

      // Online softmax. Key 0 is in tile 0 and never masked, so m_run is finite from tile 0 on;
      // `base` still guards a fully masked row against inf - inf.
#pragma unroll
      for (int m = 0; m < WM; ++m) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          float mx = -INFINITY;
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
            mx = fmaxf(mx, fmaxf(s[m][nt][2 * hh], s[m][nt][2 * hh + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float m_new = fmaxf(m_run[m][hh], mx * scale_log2);
          const float base = m_new == -INFINITY ? 0.f : m_new;
          const float corr = fast_exp2(m_run[m][hh] - base);
          m_run[m][hh] = m_new;
          float sum = 0.f;
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
            for (int e = 2 * hh; e < 2 * hh + 2; ++e) {
              const float p = fast_exp2(fmaf(s[m][nt][e], scale_log2, -base));
              s[m][nt][e] = p;
              sum += p;
            }
          }
          l_run[m][hh] = l_run[m][hh] * corr + sum;
#pragma unroll
          for (int dt = 0; dt < DT; ++dt) {
            o[m][dt][2 * hh] *= corr;
            o[m][dt][2 * hh + 1] *= corr;
          }
        }
      }

      // O += P V: P (bf16) is the A operand straight from the S accumulators; V rows are keys
      // (the MMA's k), so its B fragments come transposed.
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        uint32_t pa[WM][4];
#pragma unroll
        for (int m = 0; m < WM; ++m) accumulators_to_a(pa[m], s[m][2 * kk], s[m][2 * kk + 1]);
#pragma unroll
        for (int dn = 0; dn < HS / 16; ++dn) {
          uint32_t vb[4];
          ldmatrix_x4_trans(vb, v_t + (kk * 16 + r8 + 8 * (mi & 1)) * S + dn * 16 + 8 * (mi >> 1));
#pragma unroll
          for (int m = 0; m < WM; ++m) {
            mma_16816(o[m][2 * dn], pa[m], vb[0], vb[1]);
            mma_16816(o[m][2 * dn + 1], pa[m], vb[2], vb[3]);
          }
        }
      }
    }
    __syncthreads();  // this tile's buffer is refilled in the next iteration
  }

  // Normalize, save lse, and stage O (bf16) in this warp's own rows of the Q tile, which only
  // this warp has read, so the global writes are whole 16-byte chunks.
  bf16_t* stage = q_s + warp * 16 * WM * S;
#pragma unroll
  for (int m = 0; m < WM; ++m) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float l = l_run[m][hh];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = 1.f / l;
      const int row = m * 16 + g + 8 * hh;
      const int query = warp_q0 + row;
      if (t4 == 0 && query < T) lse[size_t(bh) * T + query] = (m_run[m][hh] + log2f(l)) * kLn2;
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        *reinterpret_cast<uint32_t*>(stage + row * S + dt * 8 + 2 * t4) =
            pack_bf16(o[m][dt][2 * hh] * inv, o[m][dt][2 * hh + 1] * inv);
      }
    }
  }
  __syncwarp();
  store_rows_warp<16 * WM, HS>(out + (size_t(b) * T + warp_q0) * C + h * HS, C, stage, T - warp_q0,
                               lane);
}

template <class Cfg>
void launch_forward(bf16_t* out, float* lse, const bf16_t* qkv, int B, int T, int C, int NH,
                    cudaStream_t stream) {
  auto kernel = attention_forward_kernel<Cfg>;
  TACO_CUDA_OK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(Cfg::kSmemBytes)));
  const dim3 grid(B * NH, (T + Cfg::kBlockM - 1) / Cfg::kBlockM);
  const float scale_log2 = kLog2e / sqrtf(float(Cfg::HS));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(out, lse, qkv, T, C, NH, scale_log2);
  TACO_LAUNCH_OK();
}

}  // namespace

void attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                       Stream stream) {
  const int hs = checked_head_size("attention_forward", B, T, C, NH);
  TACO_CHECK(detail::aligned16(out) && detail::aligned16(qkv) && detail::aligned16(lse),
             "attention_forward: out, qkv and lse must be 16-byte aligned");
  if (detail::cudnn_attention_forward(out, lse, qkv, B, T, C, NH, stream)) return;
  auto* o = detail::nv(out);
  auto* x = detail::nv(qkv);
  if (hs == 64)
    launch_forward<Forward64>(o, lse, x, B, T, C, NH, stream);
  else
    launch_forward<Forward128>(o, lse, x, B, T, C, NH, stream);
}

}  // namespace taco::cuda
