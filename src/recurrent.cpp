// The step loop of RNN, GRU and LSTM for float32: per step one GEMM of the previous hidden
// state against R^T (an AVX2 + FMA register-tiled kernel on R^T packed once into 24-column
// panels; a portable loop without AVX2), then the gate nonlinearities fused per row.
//
// The input projection of all steps (X W^T + biases, one BLAS GEMM in numpy) arrives as
// xs[t, n, d*G*H + j], in TIME order for every direction: the reverse direction's step s of
// batch entry n reads and writes time lens[n] - 1 - s itself, so no reordered copies are made.
// Y is written as [T, D, N, H] in time order; steps past an entry's length write zeros to Y
// and leave its state alone. Gates are in ONNX order: RNN (h), GRU (z, r, h), LSTM (i, o, f, c).
// The pure-Python twin is the numpy step loop in onnx_light/runtime/kernels/recurrent.py.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "simd.h"

namespace nb = nanobind;

namespace onnx_light_recurrent {
namespace {

using In1 = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using In2 = nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using In3 = nb::ndarray<const float, nb::ndim<3>, nb::c_contig, nb::device::cpu>;
using Lens = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Out3 = nb::ndarray<nb::numpy, float, nb::ndim<3>>;
using Out4 = nb::ndarray<nb::numpy, float, nb::ndim<4>>;
using Out1 = nb::ndarray<nb::numpy, float, nb::ndim<1>>;

constexpr int64_t NR = 24;  // columns per packed panel of R^T (three 8-float vectors)
constexpr int64_t MR = 4;   // batch rows per register tile: 12 accumulators, 3 panel vectors, 1 broadcast

// ---------------------------------------------------------------------------
// activations: the names of onnx_light/runtime/kernels/recurrent.py, in this order
// ---------------------------------------------------------------------------
enum Kind : int {
    RELU = 0,
    TANH,
    SIGMOID,
    AFFINE,
    LEAKYRELU,
    THRESHOLDEDRELU,
    SCALEDTANH,
    HARDSIGMOID,
    ELU,
    SOFTSIGN,
    SOFTPLUS,
    KINDS
};

struct Act {
    int kind;
    float alpha, beta, clip;  // clip < 0 (or NaN): none
};

inline float scalar_act(const Act &a, float x) {
    switch (a.kind) {
        case RELU: return x > 0 ? x : (x != x ? x : 0.0f);
        case TANH: return std::tanh(x);
        case SIGMOID: return 1.0f / (1.0f + std::exp(-x));
        case AFFINE: return a.alpha * x + a.beta;
        case LEAKYRELU: return x >= 0 ? x : a.alpha * x;
        case THRESHOLDEDRELU: return x > a.alpha ? x : (x != x ? x : 0.0f);
        case SCALEDTANH: return a.alpha * std::tanh(a.beta * x);
        case HARDSIGMOID: {
            const float v = a.alpha * x + a.beta;
            return v != v ? v : std::min(1.0f, std::max(0.0f, v));
        }
        case ELU: return x >= 0 ? x : a.alpha * (std::exp(std::min(x, 0.0f)) - 1.0f);
        case SOFTSIGN: return x / (1.0f + std::fabs(x));
        case SOFTPLUS: return std::max(x, 0.0f) + std::log1p(std::exp(-std::fabs(x)));
    }
    return x;
}

inline float clipped(float x, float clip) {
    // NaN stays NaN (as np.clip)
    if (!(clip >= 0)) return x;
    return x > clip ? clip : (x < -clip ? -clip : x);
}

void act_portable(const Act &a, float *x, int64_t n) {
    for (int64_t j = 0; j < n; ++j) x[j] = scalar_act(a, clipped(x[j], a.clip));
}

#if ONNX_LIGHT_AVX512
// exp(x) for |x| <= 88.3: x = k ln2 + r with |r| <= ln2 / 2, exp(r) by its Taylor series to
// degree 7 (relative error below 1e-8 there), times 2^k built in the exponent bits. NaN stays NaN.
// The polynomial by Estrin's scheme (pairs, then r^2 and r^4): 3 dependent FMAs instead of 7,
// so the gates' chains of exp, division and cell update overlap more in the core's window.
AVX2 inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_set1_ps(88.3f), _mm256_max_ps(_mm256_set1_ps(-87.3f), x));
    const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693145751953125f), x);  // ln2 high bits: exact product
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(1.428606765330187e-06f), r);     // ln2 - high bits
    const __m256 r2 = _mm256_mul_ps(r, r), r4 = _mm256_mul_ps(r2, r2);
    const __m256 p01 = _mm256_add_ps(r, _mm256_set1_ps(1.0f));
    const __m256 p23 = _mm256_fmadd_ps(r, _mm256_set1_ps(1.0f / 6.0f), _mm256_set1_ps(0.5f));
    const __m256 p45 = _mm256_fmadd_ps(r, _mm256_set1_ps(1.0f / 120.0f), _mm256_set1_ps(1.0f / 24.0f));
    const __m256 p67 = _mm256_fmadd_ps(r, _mm256_set1_ps(1.0f / 5040.0f), _mm256_set1_ps(1.0f / 720.0f));
    const __m256 p03 = _mm256_fmadd_ps(p23, r2, p01), p47 = _mm256_fmadd_ps(p67, r2, p45);
    const __m256 p = _mm256_fmadd_ps(p47, r4, p03);
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// sigmoid of NV vectors at once, each step of exp8 applied to all of them before the next: NV
// independent chains side by side, so the core overlaps their latencies (one chain alone waits
// on ~60 cycles of dependent FMAs and a division, and an LSTM row is made of such chains).
template <int NV>
AVX2 inline void sigmoid_n(__m256 *v) {
    __m256 k[NV], r[NV], p[NV];
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) {
        const __m256 x = _mm256_min_ps(_mm256_set1_ps(88.3f), _mm256_max_ps(_mm256_set1_ps(-87.3f), _mm256_sub_ps(_mm256_setzero_ps(), v[j])));
        k[j] = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        r[j] = _mm256_fnmadd_ps(k[j], _mm256_set1_ps(0.693145751953125f), x);
    }
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) r[j] = _mm256_fnmadd_ps(k[j], _mm256_set1_ps(1.428606765330187e-06f), r[j]);
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) {
        const __m256 r2 = _mm256_mul_ps(r[j], r[j]), r4 = _mm256_mul_ps(r2, r2);
        const __m256 p01 = _mm256_add_ps(r[j], _mm256_set1_ps(1.0f));
        const __m256 p23 = _mm256_fmadd_ps(r[j], _mm256_set1_ps(1.0f / 6.0f), _mm256_set1_ps(0.5f));
        const __m256 p45 = _mm256_fmadd_ps(r[j], _mm256_set1_ps(1.0f / 120.0f), _mm256_set1_ps(1.0f / 24.0f));
        const __m256 p67 = _mm256_fmadd_ps(r[j], _mm256_set1_ps(1.0f / 5040.0f), _mm256_set1_ps(1.0f / 720.0f));
        p[j] = _mm256_fmadd_ps(_mm256_fmadd_ps(p67, r2, p45), r4, _mm256_fmadd_ps(p23, r2, p01));
    }
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) {
        const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k[j]), _mm256_set1_epi32(127)), 23);
        const __m256 ex = _mm256_mul_ps(p[j], _mm256_castsi256_ps(e));
        v[j] = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), ex));
    }
}

AVX2 inline __m256 sigmoid8(__m256 x) {
    const __m256 one = _mm256_set1_ps(1.0f);
    return _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

// tanh(x) = 1 - 2 / (exp(2x) + 1); absolute error ~1e-7 (as the numpy twin's float32 tanh)
AVX2 inline __m256 tanh8(__m256 x) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 e = exp8(_mm256_add_ps(x, x));
    return _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
}

AVX2 void act_avx2(const Act &a, float *x, int64_t n) {
    if (a.kind != RELU && a.kind != TANH && a.kind != SIGMOID) return act_portable(a, x, n);
    const bool clip = a.clip >= 0;
    const __m256 hi = _mm256_set1_ps(a.clip), lo = _mm256_set1_ps(-a.clip), zero = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_loadu_ps(x + j);
        if (clip) v = _mm256_min_ps(hi, _mm256_max_ps(lo, v));
        if (a.kind == RELU)
            v = _mm256_max_ps(zero, v);  // NaN stays NaN (max returns its second operand)
        else if (a.kind == TANH)
            v = tanh8(v);
        else
            v = sigmoid8(v);
        _mm256_storeu_ps(x + j, v);
    }
    if (j < n) {
        float tail[8] = {0};
        std::memcpy(tail, x + j, sizeof(float) * (n - j));
        act_avx2(a, tail, 8);
        std::memcpy(x + j, tail, sizeof(float) * (n - j));
    }
}

// C[r, 0:24] (+)= sum_k A[r, k] * B[k, 0:24] for r < ROWS (B one packed panel, 24 floats a row),
// accumulating into C's values or (ZERO) overwriting them.
// 4 x 24 rather than 6 x 16: batches of 16 (and 4, 8, 12) fill every tile.
template <int ROWS, bool ZERO>
AVX2 void tile_avx2(int64_t K, const float *A, int64_t lda, const float *B, float *C, int64_t ldc) {
    __m256 acc[ROWS][3];
#pragma GCC unroll 4
    for (int r = 0; r < ROWS; ++r) {
        acc[r][0] = ZERO ? _mm256_setzero_ps() : _mm256_loadu_ps(C + r * ldc);
        acc[r][1] = ZERO ? _mm256_setzero_ps() : _mm256_loadu_ps(C + r * ldc + 8);
        acc[r][2] = ZERO ? _mm256_setzero_ps() : _mm256_loadu_ps(C + r * ldc + 16);
    }
    for (int64_t k = 0; k < K; ++k) {
        const float *b = B + k * NR;
        const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8), b2 = _mm256_loadu_ps(b + 16);
#pragma GCC unroll 4
        for (int r = 0; r < ROWS; ++r) {
            const __m256 a = _mm256_broadcast_ss(A + r * lda + k);
            acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
            acc[r][2] = _mm256_fmadd_ps(a, b2, acc[r][2]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < ROWS; ++r) {
        _mm256_storeu_ps(C + r * ldc, acc[r][0]);
        _mm256_storeu_ps(C + r * ldc + 8, acc[r][1]);
        _mm256_storeu_ps(C + r * ldc + 16, acc[r][2]);
    }
}

// One row: its three accumulators alone wait on the FMA latency (a matrix-vector product, batch
// 1), so even and odd k feed two sets, summed at the end (the sum's order differs from the
// twin's by rounding only).
template <bool ZERO>
AVX2 void tile_avx2_row(int64_t K, const float *A, const float *B, float *C) {
    __m256 a0 = ZERO ? _mm256_setzero_ps() : _mm256_loadu_ps(C), a1 = ZERO ? _mm256_setzero_ps() : _mm256_loadu_ps(C + 8),
           a2 = ZERO ? _mm256_setzero_ps() : _mm256_loadu_ps(C + 16);
    __m256 e0 = _mm256_setzero_ps(), e1 = e0, e2 = e0;
    int64_t k = 0;
    for (; k + 2 <= K; k += 2) {
        const float *b = B + k * NR;
        const __m256 x = _mm256_broadcast_ss(A + k), z = _mm256_broadcast_ss(A + k + 1);
        a0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(b), a0);
        a1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(b + 8), a1);
        a2 = _mm256_fmadd_ps(x, _mm256_loadu_ps(b + 16), a2);
        e0 = _mm256_fmadd_ps(z, _mm256_loadu_ps(b + NR), e0);
        e1 = _mm256_fmadd_ps(z, _mm256_loadu_ps(b + NR + 8), e1);
        e2 = _mm256_fmadd_ps(z, _mm256_loadu_ps(b + NR + 16), e2);
    }
    if (k < K) {
        const float *b = B + k * NR;
        const __m256 x = _mm256_broadcast_ss(A + k);
        a0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(b), a0);
        a1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(b + 8), a1);
        a2 = _mm256_fmadd_ps(x, _mm256_loadu_ps(b + 16), a2);
    }
    _mm256_storeu_ps(C, _mm256_add_ps(a0, e0));
    _mm256_storeu_ps(C + 8, _mm256_add_ps(a1, e1));
    _mm256_storeu_ps(C + 16, _mm256_add_ps(a2, e2));
}

// One row against P panels at once (a matrix-vector product, batch 1): 3P accumulators, one
// broadcast of A[k] for all of them. Twelve independent chains (P = 4) keep both FMA pipes busy
// (4 cycles of latency, 2 FMAs a cycle), where one panel's three chains (tile_avx2_row, split in
// even and odd k) wait on the latency; each accumulator still sums its k in order.
template <int P, bool ZERO>
AVX2 void panels_avx2_row(int64_t K, const float *A, const float *B, float *C) {
    __m256 acc[P][3];
#pragma GCC unroll 4
    for (int q = 0; q < P; ++q)
        for (int v = 0; v < 3; ++v) acc[q][v] = ZERO ? _mm256_setzero_ps() : _mm256_loadu_ps(C + q * NR + 8 * v);
    for (int64_t k = 0; k < K; ++k) {
        const __m256 a = _mm256_broadcast_ss(A + k);
#pragma GCC unroll 4
        for (int q = 0; q < P; ++q) {
            const float *b = B + (q * K + k) * NR;
            acc[q][0] = _mm256_fmadd_ps(a, _mm256_loadu_ps(b), acc[q][0]);
            acc[q][1] = _mm256_fmadd_ps(a, _mm256_loadu_ps(b + 8), acc[q][1]);
            acc[q][2] = _mm256_fmadd_ps(a, _mm256_loadu_ps(b + 16), acc[q][2]);
        }
    }
#pragma GCC unroll 4
    for (int q = 0; q < P; ++q)
        for (int v = 0; v < 3; ++v) _mm256_storeu_ps(C + q * NR + 8 * v, acc[q][v]);
}

template <bool ZERO>
AVX2 void gemm_avx2(int64_t M, int64_t K, int64_t panels, const float *A, int64_t lda, const float *B, float *C,
                    int64_t ldc) {
    if (M == 1) {
        int64_t p = 0;
        for (; p + 4 <= panels; p += 4) panels_avx2_row<4, ZERO>(K, A, B + p * K * NR, C + p * NR);
        switch (panels - p) {
            case 3: panels_avx2_row<3, ZERO>(K, A, B + p * K * NR, C + p * NR); break;
            case 2: panels_avx2_row<2, ZERO>(K, A, B + p * K * NR, C + p * NR); break;
            case 1: tile_avx2_row<ZERO>(K, A, B + p * K * NR, C + p * NR); break;
            default: break;
        }
        return;
    }
    for (int64_t p = 0; p < panels; ++p) {
        const float *Bp = B + p * K * NR;
        float *Cp = C + p * NR;
        int64_t i = 0;
        for (; i + MR <= M; i += MR) tile_avx2<MR, ZERO>(K, A + i * lda, lda, Bp, Cp + i * ldc, ldc);
        switch (M - i) {
            case 3: tile_avx2<3, ZERO>(K, A + i * lda, lda, Bp, Cp + i * ldc, ldc); break;
            case 2: tile_avx2<2, ZERO>(K, A + i * lda, lda, Bp, Cp + i * ldc, ldc); break;
            case 1: tile_avx2_row<ZERO>(K, A + i * lda, Bp, Cp + i * ldc); break;
            default: break;
        }
    }
}
// one activation on 8 lanes, its input clipped first (clip < 0: none); the functions without a
// vector form run lane by lane
AVX2 inline __m256 act8(const Act &a, __m256 v) {
    if (a.clip >= 0) v = _mm256_min_ps(_mm256_set1_ps(a.clip), _mm256_max_ps(_mm256_set1_ps(-a.clip), v));
    if (a.kind == SIGMOID) return sigmoid8(v);
    if (a.kind == TANH) return tanh8(v);
    if (a.kind == RELU) return _mm256_max_ps(_mm256_setzero_ps(), v);  // NaN stays NaN
    alignas(32) float lane[8];
    _mm256_store_ps(lane, v);
    for (float &x : lane) x = scalar_act(a, x);
    return _mm256_load_ps(lane);
}

// The LSTM's state update of one batch row from its gates: g the GEMM's row (h R^T, gates
// interleaved per 8 units, see packed_gates), x the projected input [4H] (ONNX gate order), bias
// [4H] or null, p the peepholes [3H] (i, o, f) or null; c updated in place, h and y written.
// acts: f, g, h (h unclipped: it acts on the cell state, which clip leaves alone).
struct LstmRow {
    int64_t H;
    const Act *f, *g, *h;
    bool input_forget;
    bool defaults;  // f sigmoid, g and h tanh (the ONNX defaults), f and g clipped alike
};

// 8 floats, or (not FULL) those of mask's lanes: the rest read as 0 and are not written. Masked
// stores are slow on some CPUs, so only the last block of a row takes them.
template <bool FULL>
AVX2 inline __m256 load8(const float *a, __m256i mask) {
    return FULL ? _mm256_loadu_ps(a) : _mm256_maskload_ps(a, mask);
}

template <bool FULL>
AVX2 inline void store8(float *a, __m256 v, __m256i mask) {
    if (FULL)
        _mm256_storeu_ps(a, v);
    else
        _mm256_maskstore_ps(a, mask, v);
}

// hidden units j0 .. j0+7 (those of mask when not FULL) of lstm_row_avx2
template <bool FULL>
AVX2 inline void lstm_block(const LstmRow &lr, int64_t j0, __m256i mask, const float *gq, const float *x,
                            const float *bias, const float *p, float *c, float *h, float *y) {
    const int64_t H = lr.H;
    __m256 pre[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
        pre[k] = _mm256_add_ps(_mm256_loadu_ps(gq + 8 * k), load8<FULL>(x + k * H + j0, mask));
        if (bias) pre[k] = _mm256_add_ps(pre[k], load8<FULL>(bias + k * H + j0, mask));
    }
    const __m256 cp = load8<FULL>(c + j0, mask);
    if (p) {
        pre[0] = _mm256_fmadd_ps(load8<FULL>(p + j0, mask), cp, pre[0]);
        pre[2] = _mm256_fmadd_ps(load8<FULL>(p + 2 * H + j0, mask), cp, pre[2]);
    }
    const __m256 i = act8(*lr.f, pre[0]);
    const __m256 fg = lr.input_forget ? _mm256_sub_ps(_mm256_set1_ps(1.0f), i) : act8(*lr.f, pre[2]);
    const __m256 cand = act8(*lr.g, pre[3]);
    const __m256 cn = _mm256_add_ps(_mm256_mul_ps(fg, cp), _mm256_mul_ps(i, cand));
    if (p) pre[1] = _mm256_fmadd_ps(load8<FULL>(p + H + j0, mask), cn, pre[1]);
    const __m256 hn = _mm256_mul_ps(act8(*lr.f, pre[1]), act8(*lr.h, cn));
    store8<FULL>(c + j0, cn, mask);
    store8<FULL>(h + j0, hn, mask);
    store8<FULL>(y + j0, hn, mask);
}

// Two full blocks (units j0 .. j0+15) with the default activations (f sigmoid, g and h tanh:
// tanh(x) = 2 sigmoid(2x) - 1) and no peepholes: the eight gates' sigmoids side by side, then
// the two cells' tanh.
AVX2 inline void lstm_pair(const LstmRow &lr, int64_t j0, const float *gq, const float *x, const float *bias,
                           float *c, float *h, float *y) {
    const int64_t H = lr.H;
    const bool clip = lr.f->clip >= 0;
    const __m256 hi = _mm256_set1_ps(lr.f->clip), lo = _mm256_set1_ps(-lr.f->clip);
    __m256 v[8];  // block b's gates i, o, f, c at v[4b + k]
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
        const int b = j / 4, k = j % 4;
        const int64_t at = k * H + j0 + 8 * b;
        __m256 pre = _mm256_add_ps(_mm256_loadu_ps(gq + 32 * b + 8 * k), _mm256_loadu_ps(x + at));
        if (bias) pre = _mm256_add_ps(pre, _mm256_loadu_ps(bias + at));
        if (clip) pre = _mm256_min_ps(hi, _mm256_max_ps(lo, pre));
        v[j] = k == 3 ? _mm256_add_ps(pre, pre) : pre;
    }
    sigmoid_n<8>(v);
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 cn[2];
#pragma GCC unroll 2
    for (int b = 0; b < 2; ++b) {
        const __m256 i = v[4 * b], fg = lr.input_forget ? _mm256_sub_ps(one, i) : v[4 * b + 2];
        const __m256 cand = _mm256_fmsub_ps(_mm256_set1_ps(2.0f), v[4 * b + 3], one);
        cn[b] = _mm256_add_ps(_mm256_mul_ps(fg, _mm256_loadu_ps(c + j0 + 8 * b)), _mm256_mul_ps(i, cand));
        _mm256_storeu_ps(c + j0 + 8 * b, cn[b]);
    }
    __m256 t[2] = {_mm256_add_ps(cn[0], cn[0]), _mm256_add_ps(cn[1], cn[1])};
    sigmoid_n<2>(t);
#pragma GCC unroll 2
    for (int b = 0; b < 2; ++b) {
        const __m256 hn = _mm256_mul_ps(v[4 * b + 1], _mm256_fmsub_ps(_mm256_set1_ps(2.0f), t[b], one));
        _mm256_storeu_ps(h + j0 + 8 * b, hn);
        _mm256_storeu_ps(y + j0 + 8 * b, hn);
    }
}

AVX2 void lstm_row_avx2(const LstmRow &lr, const float *g, const float *x, const float *bias, const float *p, float *c,
                        float *h, float *y) {
    const int64_t H = lr.H, full = H / 8;
    const __m256i none = _mm256_setzero_si256();
    int64_t q = 0;
    if (lr.defaults && !p)
        for (; q + 2 <= full; q += 2) lstm_pair(lr, 8 * q, g + q * 32, x, bias, c, h, y);
    for (; q < full; ++q) lstm_block<true>(lr, 8 * q, none, g + q * 32, x, bias, p, c, h, y);
    if (H % 8) {
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(H % 8)),
                                                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        lstm_block<false>(lr, 8 * full, mask, g + full * 32, x, bias, p, c, h, y);
    }
}

#endif  // ONNX_LIGHT_AVX512

void gemm_portable(int64_t M, int64_t K, int64_t panels, const float *A, int64_t lda, const float *B, float *C,
                   int64_t ldc, bool zero) {
    for (int64_t p = 0; p < panels; ++p)
        for (int64_t i = 0; i < M; ++i) {
            float *c = C + i * ldc + p * NR;
            if (zero) std::memset(c, 0, sizeof(float) * NR);
            for (int64_t k = 0; k < K; ++k) {
                const float a = A[i * lda + k];
                const float *b = B + (p * K + k) * NR;
                for (int64_t j = 0; j < NR; ++j) c[j] += a * b[j];
            }
        }
}

// R^T restricted to R's rows [r0, r0 + cols), packed: panel p, row k holds R[r0 + p*24 + j, k]
// for j < 24 (zero past cols). `k` is R's row length (the hidden size).
struct Packed {
    int64_t cols = 0, K = 0, panels = 0, width = 0;  // width: panels * 24, the buffer's row stride
    std::unique_ptr<float[]> data;
    const float *view = nullptr;  // the floats when held elsewhere (then data is empty)
    const float *get() const { return view ? view : data.get(); }
    Packed() = default;
};

// R^T restricted to R's rows [r0, r0 + cols), written into `into` (every float, zero past cols)
// unless not `fill` (then `into` holds them already).
Packed packed_panels(const float *r, int64_t r0, int64_t cols, int64_t K, float *into, bool fill) {
    Packed pk;
    pk.cols = cols;
    pk.K = K;
    pk.panels = (cols + NR - 1) / NR;
    pk.width = pk.panels * NR;
    pk.view = into;
    for (int64_t p = 0; fill && p < pk.panels; ++p)
        for (int64_t j = 0; j < NR; ++j) {
            const float *row = p * NR + j < cols ? r + (r0 + p * NR + j) * K : nullptr;
            for (int64_t k = 0; k < K; ++k) into[(p * K + k) * NR + j] = row ? row[k] : 0.0f;
        }
    return pk;
}

// B [K, cols] (row-major, row stride ldb) packed as the GEMM's right operand: panel p, row k
// holds B[k, p*24 + j] for j < 24 (zero past cols).
Packed packed_rows(const float *b, int64_t K, int64_t cols, int64_t ldb) {
    Packed pk;
    pk.cols = cols;
    pk.K = K;
    pk.panels = (cols + NR - 1) / NR;
    pk.width = pk.panels * NR;
    pk.data.reset(new float[pk.panels * K * NR]());
    for (int64_t p = 0; p < pk.panels; ++p)
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < NR && p * NR + j < cols; ++j) pk.data[(p * K + k) * NR + j] = b[k * ldb + p * NR + j];
    return pk;
}

// LSTM's R^T with the gates interleaved per 8 hidden units: packed column q*32 + g*8 + j is R's row
// g*H + 8q + j (ONNX gates g = i, o, f, c; a zero column where 8q + j >= H), so the GEMM's row of
// one step holds, per block q, the four gates of hidden units 8q .. 8q+7 side by side. Written
// into `into` (a per-thread buffer reused across calls: no fresh pages to fault in), every float;
// not `fill`: `into` holds them already (pack_recurrent, kept by the caller for a constant R).
Packed packed_gates(const float *r, int64_t H, float *into, bool fill = true) {
    Packed pk;
    pk.cols = (H + 7) / 8 * 32;
    pk.K = H;
    pk.panels = (pk.cols + NR - 1) / NR;
    pk.width = pk.panels * NR;
    pk.view = into;
    for (int64_t p = 0; fill && p < pk.panels; ++p) {
        const float *rows[NR];  // R's row of each column of the panel, or null (a zero column)
        for (int64_t j = 0; j < NR; ++j) {
            const int64_t pc = p * NR + j, q = pc / 32, g = (pc % 32) / 8, unit = 8 * q + pc % 8;
            rows[j] = pc < pk.cols && unit < H ? r + (g * H + unit) * H : nullptr;
        }
        float *panel = into + p * H * NR;
        for (int64_t k = 0; k < H; ++k)
            for (int64_t j = 0; j < NR; ++j) panel[k * NR + j] = rows[j] ? rows[j][k] : 0.0f;
    }
    return pk;
}

// floats of packed_gates(r, H, ...)
inline int64_t packed_gates_size(int64_t H) { return ((H + 7) / 8 * 32 + NR - 1) / NR * NR * H; }

// The packs of one direction's R that the step loop reads, in order: LSTM on AVX2 (`fused`) R^T with
// the gates interleaved (packed_gates); GRU R_zr^T, then R_h^T; otherwise R^T. {r0, cols, gates}
struct PackSpec {
    int64_t r0, cols;
    bool gates;
};

std::vector<PackSpec> pack_specs(int op, bool fused, int64_t H, int64_t G) {
    if (fused) return {{0, 4 * H, true}};
    if (op == 1) return {{0, 2 * H, false}, {2 * H, H, false}};
    return {{0, G * H, false}};
}

int64_t pack_floats(const PackSpec &sp, int64_t H) {
    return sp.gates ? packed_gates_size(H) : (sp.cols + NR - 1) / NR * NR * H;
}

// direction d's packs of R (rd: its [G*H, H] rows) at `into`, filled unless not `fill`
std::vector<Packed> direction_packs(const std::vector<PackSpec> &specs, const float *rd, int64_t H, float *into,
                                    bool fill) {
    std::vector<Packed> out;
    for (const PackSpec &sp : specs) {
        out.push_back(sp.gates ? packed_gates(rd, H, into, fill) : packed_panels(rd, sp.r0, sp.cols, H, into, fill));
        into += pack_floats(sp, H);
    }
    return out;
}

// a per-thread buffer of at least n floats, kept between calls (its contents are not)
float *scratch(size_t n) {
    static thread_local std::vector<float> buf;
    if (buf.size() < n) buf.assign(n, 0.0f);
    return buf.data();
}

struct Kernels {
    bool avx2;
    // C (+)= A B for the M rows of A (zero: C's values are overwritten, not added to)
    void gemm(int64_t M, const Packed &b, const float *A, int64_t lda, float *C, int64_t ldc, bool zero = false) const {
#if ONNX_LIGHT_AVX512
        if (avx2 && zero) return gemm_avx2<true>(M, b.K, b.panels, A, lda, b.get(), C, ldc);
        if (avx2) return gemm_avx2<false>(M, b.K, b.panels, A, lda, b.get(), C, ldc);
#endif
        gemm_portable(M, b.K, b.panels, A, lda, b.get(), C, ldc, zero);
    }
    void act(const Act &a, float *x, int64_t n) const {
#if ONNX_LIGHT_AVX512
        if (avx2) return act_avx2(a, x, n);
#endif
        act_portable(a, x, n);
    }
};

// ---------------------------------------------------------------------------
// the recurrences
// ---------------------------------------------------------------------------
struct Problem {
    int op;  // 0 RNN, 1 GRU, 2 LSTM
    int64_t T, N, D, H, G;
    const float *xs;    // [T, N, D*G*H]
    const float *r;     // [D, G*H, H]
    const float *p;     // LSTM peepholes [D, 3H] or null
    const float *rbh;   // GRU: Rbh [D, H] or null (zeros)
    const float *bias;  // added to xs: [D, G*H] or null
    const int64_t *lens;
    const bool *reverse;
    const Act *acts;    // [D, nacts]
    int nacts;
    bool input_forget, linear_before_reset;
    float *y;           // [T, D, N, H]
    float *h, *c;       // states [D, N, H] (c: LSTM only)
};

// time index of step s of entry n, or -1 past its length
inline int64_t time_of(const Problem &pb, int64_t d, int64_t n, int64_t s) {
    if (s >= pb.lens[n]) return -1;
    return pb.reverse[d] ? pb.lens[n] - 1 - s : s;
}

void lstm_row(const Problem &pb, const Kernels &kern, int64_t d, float *g, float *h, float *c, float *tmp) {
    const int64_t H = pb.H;
    const Act *a = pb.acts + d * pb.nacts;
    Act hact = a[2];
    hact.clip = -1.0f;  // h acts on the cell state, which clip leaves alone
    float *gi = g, *go = g + H, *gf = g + 2 * H, *gc = g + 3 * H;
    const float *P = pb.p ? pb.p + d * 3 * H : nullptr;
    if (P)
        for (int64_t j = 0; j < H; ++j) {
            gi[j] += P[j] * c[j];
            gf[j] += P[2 * H + j] * c[j];
        }
    kern.act(a[0], gi, H);
    if (!pb.input_forget) kern.act(a[0], gf, H);
    kern.act(a[1], gc, H);
    for (int64_t j = 0; j < H; ++j) {
        const float fg = pb.input_forget ? 1.0f - gi[j] : gf[j];
        c[j] = fg * c[j] + gi[j] * gc[j];
    }
    if (P)
        for (int64_t j = 0; j < H; ++j) go[j] += P[H + j] * c[j];
    kern.act(a[0], go, H);
    std::memcpy(tmp, c, sizeof(float) * H);
    kern.act(hact, tmp, H);
    for (int64_t j = 0; j < H; ++j) h[j] = go[j] * tmp[j];
}

// One step of every entry of direction d. `packs` holds R^T (RNN, LSTM) or R_zr^T, R_h^T (GRU);
// g (and g2 for GRU) hold the gate pre-activations, tmp N x H floats of scratch.
void step(const Problem &pb, const Kernels &kern, int64_t d, int64_t s, const std::vector<Packed> &packs, float *g,
          float *g2, float *tmp) {
    const int64_t N = pb.N, H = pb.H, GH = pb.G * H, ld = packs[0].width;
    float *h = pb.h + d * N * H, *c = pb.c ? pb.c + d * N * H : nullptr;
    const Act *a = pb.acts + d * pb.nacts;
    const float *bias = pb.bias ? pb.bias + d * GH : nullptr;
    auto x_of = [&](int64_t t, int64_t n) { return pb.xs + (t * N + n) * pb.D * GH + d * GH; };
    // the gates of the first GEMM start from the projected input (GRU: z and r only); the rows of
    // entries past their length start from zero and are never read; padding columns stay zero
    const int64_t first = pb.op == 1 ? 2 * H : GH;
    for (int64_t n = 0; n < N; ++n) {
        const int64_t t = time_of(pb, d, n, s);
        if (t >= 0 && bias) {
            const float *x = x_of(t, n);
            for (int64_t j = 0; j < first; ++j) g[n * ld + j] = x[j] + bias[j];
        } else if (t >= 0) {
            std::memcpy(g + n * ld, x_of(t, n), sizeof(float) * first);
        } else
            std::memset(g + n * ld, 0, sizeof(float) * first);
    }
    kern.gemm(N, packs[0], h, H, g, ld);
    if (pb.op == 1) {
        // GRU: z, r from the first GEMM, then h from (r * H) Rh^T + Rbh, or r * (H Rh^T + Rbh)
        for (int64_t n = 0; n < N; ++n) {
            const int64_t t = time_of(pb, d, n, s);
            if (t < 0) continue;
            float *gz = g + n * ld;
            kern.act(a[0], gz, 2 * H);
            if (!pb.linear_before_reset)
                for (int64_t j = 0; j < H; ++j) tmp[n * H + j] = gz[H + j] * h[n * H + j];
        }
        const int64_t ld2 = packs[1].width;
        std::memset(g2, 0, sizeof(float) * N * ld2);
        kern.gemm(N, packs[1], pb.linear_before_reset ? h : tmp, H, g2, ld2);
    }
    for (int64_t n = 0; n < N; ++n) {
        const int64_t t = time_of(pb, d, n, s);
        if (t < 0) continue;
        float *gn = g + n * ld, *hn = h + n * H;
        const float *x = x_of(t, n);
        if (pb.op == 0) {
            kern.act(a[0], gn, H);
            std::memcpy(hn, gn, sizeof(float) * H);
        } else if (pb.op == 1) {
            float *hr = g2 + n * packs[1].width;
            const float *rbh = pb.rbh ? pb.rbh + d * H : nullptr;
            for (int64_t j = 0; j < H; ++j) {
                float v = hr[j] + (rbh ? rbh[j] : 0.0f);
                if (pb.linear_before_reset) v *= gn[H + j];
                hr[j] = v + (bias ? x[2 * H + j] + bias[2 * H + j] : x[2 * H + j]);
            }
            kern.act(a[1], hr, H);
            for (int64_t j = 0; j < H; ++j) hn[j] = (hn[j] - hr[j]) * gn[j] + hr[j];
        } else {
            lstm_row(pb, kern, d, gn, hn, c + n * H, tmp);
        }
        std::memcpy(pb.y + ((t * pb.D + d) * N + n) * H, hn, sizeof(float) * H);
    }
}

// One LSTM step of every entry of direction d on AVX2: the GEMM into g (rows of N, gates
// interleaved), then each active row's update straight from g, its input and its bias.
void lstm_step_avx2(const Problem &pb, const Kernels &kern, int64_t d, int64_t s, const Packed &pk, float *g) {
#if ONNX_LIGHT_AVX512
    const int64_t N = pb.N, H = pb.H, GH = 4 * H;
    float *h = pb.h + d * N * H, *c = pb.c + d * N * H;
    const Act *a = pb.acts + d * pb.nacts;
    Act hact = a[2];
    hact.clip = -1.0f;
    const bool defaults = a[0].kind == SIGMOID && a[1].kind == TANH && a[2].kind == TANH &&
                          (a[0].clip == a[1].clip || (!(a[0].clip >= 0) && !(a[1].clip >= 0)));
    const LstmRow lr{H, &a[0], &a[1], &hact, pb.input_forget, defaults};
    // the next step's projected inputs (xs is megabytes: in L3 or memory) are fetched into L2 while
    // this step runs
    for (int64_t n = 0; n < N; ++n) {
        const int64_t t = time_of(pb, d, n, s + 1);
        if (t < 0) continue;
        const char *x = reinterpret_cast<const char *>(pb.xs + (t * N + n) * pb.D * GH + d * GH);
        for (int64_t b = 0; b < GH * 4; b += 64) _mm_prefetch(x + b, _MM_HINT_T1);
    }
    kern.gemm(N, pk, h, H, g, pk.width, true);
    const float *bias = pb.bias ? pb.bias + d * GH : nullptr, *p = pb.p ? pb.p + d * 3 * H : nullptr;
    for (int64_t n = 0; n < N; ++n) {
        const int64_t t = time_of(pb, d, n, s);
        if (t < 0) continue;
        const float *x = pb.xs + (t * N + n) * pb.D * GH + d * GH;
        lstm_row_avx2(lr, g + n * pk.width, x, bias, p, c + n * H, h + n * H, pb.y + ((t * pb.D + d) * N + n) * H);
    }
#else
    (void)pb, (void)kern, (void)d, (void)s, (void)pk, (void)g;
#endif
}

Act act_of(int kind, float alpha, float beta, float clip) {
    if (kind < 0 || kind >= KINDS) throw std::invalid_argument("recurrent: unknown activation kind");
    return Act{kind, alpha, beta, clip};
}

// Y [T, D, N, H], last H [D, N, H] (and last C for LSTM) of one RNN (op 0), GRU (1) or LSTM (2):
// xs [T, N, D*G*H] the input projection of every step (time order) without the bias, added here
// (RNN: Wb + Rb; GRU: Wb + Rb for z, r and Wbh for h, Rbh separately; LSTM: Wb + Rb).
nb::tuple recurrent(int op, In3 xs, In3 r, In3 h0, std::optional<In3> c0, std::optional<In2> p,
                    std::optional<In2> rbh, std::optional<In2> bias, Lens lens, std::vector<bool> reverse, std::vector<int> kinds,
                    std::vector<float> alphas, std::vector<float> betas, float clip, bool input_forget,
                    bool linear_before_reset, std::optional<In1> packed) {
    static const int gates[3] = {1, 3, 4}, nacts[3] = {1, 2, 3};
    if (op < 0 || op > 2) throw std::invalid_argument("recurrent: op must be 0 (RNN), 1 (GRU) or 2 (LSTM)");
    auto dim = [](const auto &a, size_t i) { return static_cast<int64_t>(a.shape(i)); };
    const int64_t T = dim(xs, 0), N = dim(xs, 1), D = dim(r, 0), H = dim(r, 2), G = gates[op];
    const size_t na = static_cast<size_t>(nacts[op] * D);
    if (dim(r, 1) != G * H || dim(xs, 2) != D * G * H || dim(h0, 0) != D || dim(h0, 1) != N || dim(h0, 2) != H ||
        dim(lens, 0) != N || reverse.size() != static_cast<size_t>(D) || kinds.size() != na || alphas.size() != na ||
        betas.size() != na)
        throw std::invalid_argument("recurrent: inconsistent shapes");
    if (op == 2 && (!c0 || dim(*c0, 0) != D || dim(*c0, 1) != N || dim(*c0, 2) != H))
        throw std::invalid_argument("recurrent: LSTM needs initial_c [D, N, H]");
    if (p && (op != 2 || dim(*p, 0) != D || dim(*p, 1) != 3 * H))
        throw std::invalid_argument("recurrent: peepholes must be [D, 3H] (LSTM only)");
    if (rbh && (op != 1 || dim(*rbh, 0) != D || dim(*rbh, 1) != H))
        throw std::invalid_argument("recurrent: Rbh must be [D, H] (GRU only)");
    if (bias && (dim(*bias, 0) != D || dim(*bias, 1) != G * H))
        throw std::invalid_argument("recurrent: bias must be [D, G*H]");
    for (int64_t n = 0; n < N; ++n)
        if (lens.data()[n] < 0 || lens.data()[n] > T) throw std::invalid_argument("recurrent: lens out of [0, T]");
    std::vector<Act> acts;
    for (size_t k = 0; k < na; ++k) acts.push_back(act_of(kinds[k], alphas[k], betas[k], clip));
    std::unique_ptr<bool[]> rev(new bool[D]);
    for (int64_t d = 0; d < D; ++d) rev[d] = reverse[d];
    const size_t state = static_cast<size_t>(D * N * H);
    float *y = new float[std::max<size_t>(1, static_cast<size_t>(T) * state)];
    float *h = new float[std::max<size_t>(1, state)], *c = op == 2 ? new float[std::max<size_t>(1, state)] : nullptr;
    std::memcpy(h, h0.data(), sizeof(float) * state);
    if (c) std::memcpy(c, c0->data(), sizeof(float) * state);
    // R^T packed by pack_recurrent (for a constant R), or here per call
    const bool fused = op == 2 && has_avx2_fma();
    const std::vector<PackSpec> specs = pack_specs(op, fused, H, G);
    int64_t per_dir = 0;
    for (const PackSpec &sp : specs) per_dir += pack_floats(sp, H);
    if (packed && dim(*packed, 0) != D * per_dir)
        throw std::invalid_argument("recurrent: packed must be pack_recurrent(op, R) of this op and R");
    const float *prepacked = packed ? packed->data() : nullptr;
    Problem pb{op,        T,    N,    D,        H,     G,         xs.data(),    r.data(),
               p ? p->data() : nullptr, rbh ? rbh->data() : nullptr, bias ? bias->data() : nullptr, lens.data(), rev.get(),  acts.data(),
               nacts[op], input_forget, linear_before_reset, y, h, c};
    {
        nb::gil_scoped_release release;
        const Kernels kern{has_avx2_fma()};
        // LSTM on AVX2: gates interleaved, the state update fused per row (lstm_step_avx2). The
        // scratch holds R^T packed (unless given), then (fused) the GEMM's row of each batch entry
        const int64_t own = prepacked ? 0 : D * per_dir;
        float *buf = scratch(static_cast<size_t>(own + (fused ? N * (packed_gates_size(H) / H) : 0) + 8));
        std::vector<std::vector<Packed>> packs(D);
        for (int64_t d = 0; d < D; ++d) {
            float *at = prepacked ? const_cast<float *>(prepacked) + d * per_dir : buf + d * per_dir;
            packs[d] = direction_packs(specs, pb.r + d * G * H * H, H, at, !prepacked);
        }
        float *fused_scratch = buf + own;
        const int64_t ld = packs[0][0].width, ld2 = op == 1 ? packs[0][1].width : 0;
        std::unique_ptr<float[]> g(new float[fused ? 8 : N * ld + 8]()), g2(new float[N * ld2 + 8]), tmp(new float[N * H + 8]);
        int64_t steps = 0;
        for (int64_t n = 0; n < N; ++n) {
            steps = std::max(steps, lens.data()[n]);
            for (int64_t t = lens.data()[n]; t < T; ++t)
                for (int64_t d = 0; d < D; ++d) std::memset(y + ((t * D + d) * N + n) * H, 0, sizeof(float) * H);
        }
        // one direction after the other: only its packed R^T needs to stay in L2
        for (int64_t d = 0; d < D; ++d)
            for (int64_t s = 0; s < steps; ++s) {
                if (fused)
                    lstm_step_avx2(pb, kern, d, s, packs[d][0], fused_scratch);
                else
                    step(pb, kern, d, s, packs[d], g.get(), g2.get(), tmp.get());
            }
    }
    auto owner = [](float *ptr) { return nb::capsule(ptr, [](void *q) noexcept { delete[] static_cast<float *>(q); }); };
    const size_t t_ = static_cast<size_t>(T), d_ = static_cast<size_t>(D), n_ = static_cast<size_t>(N),
                 h_ = static_cast<size_t>(H);
    Out4 y_arr(y, {t_, d_, n_, h_}, owner(y));
    Out3 h_arr(h, {d_, n_, h_}, owner(h));
    if (!c) return nb::make_tuple(y_arr, h_arr, nb::none());
    return nb::make_tuple(y_arr, h_arr, Out3(c, {d_, n_, h_}, owner(c)));
}

// R [D, G*H, H] of an RNN (op 0), GRU (1) or LSTM (2) packed as recurrent()'s step loop reads it,
// for a caller that keeps it while R is constant (packing per call reads R in 24 strided streams:
// ~0.1 ms at H = 128, more than ten steps' work at H = 512).
Out1 pack_recurrent(int op, In3 r) {
    static const int gates[3] = {1, 3, 4};
    if (op < 0 || op > 2) throw std::invalid_argument("pack_recurrent: op must be 0 (RNN), 1 (GRU) or 2 (LSTM)");
    const int64_t D = static_cast<int64_t>(r.shape(0)), H = static_cast<int64_t>(r.shape(2)), G = gates[op];
    if (static_cast<int64_t>(r.shape(1)) != G * H) throw std::invalid_argument("pack_recurrent: R must be [D, G*H, H]");
    const std::vector<PackSpec> specs = pack_specs(op, op == 2 && has_avx2_fma(), H, G);
    int64_t per_dir = 0;
    for (const PackSpec &sp : specs) per_dir += pack_floats(sp, H);
    float *data = new float[std::max<int64_t>(1, D * per_dir)];
    {
        nb::gil_scoped_release release;
        for (int64_t d = 0; d < D; ++d) direction_packs(specs, r.data() + d * G * H * H, H, data + d * per_dir, true);
    }
    auto owner = nb::capsule(data, [](void *q) noexcept { delete[] static_cast<float *>(q); });
    return Out1(data, {static_cast<size_t>(D * per_dir)}, owner);
}

// ---------------------------------------------------------------------------
// the input projection X W^T of every step: W packed once (pack_weights, kept by the caller for
// constant weights), then the register-tiled GEMM over row blocks of X
// ---------------------------------------------------------------------------
using Out2 = nb::ndarray<nb::numpy, float, nb::ndim<2>>;
using Out3f = nb::ndarray<nb::numpy, float, nb::ndim<3>>;

// W [C, K] as the GEMM's right operand W^T: [panels, K, 24] (zero past C)
Out3f pack_weights(In2 w) {
    const int64_t C = static_cast<int64_t>(w.shape(0)), K = static_cast<int64_t>(w.shape(1));
    const int64_t panels = (C + NR - 1) / NR;
    float *data = new float[std::max<int64_t>(1, panels * K * NR)];
    {
        nb::gil_scoped_release release;
        for (int64_t p = 0; p < panels; ++p)
            for (int64_t j = 0; j < NR; ++j) {
                const int64_t col = p * NR + j;
                float *dst = data + p * K * NR + j;
                if (col < C)
                    for (int64_t k = 0; k < K; ++k) dst[k * NR] = w.data()[col * K + k];
                else
                    for (int64_t k = 0; k < K; ++k) dst[k * NR] = 0.0f;
            }
    }
    auto owner = nb::capsule(data, [](void *q) noexcept { delete[] static_cast<float *>(q); });
    return Out3f(data, {static_cast<size_t>(panels), static_cast<size_t>(K), static_cast<size_t>(NR)}, owner);
}

// X [M, K] times the packed W^T of C columns: [M, C]. Rows in blocks of 64 (their 64 x K floats
// stay in L1/L2 while every panel passes); the last panel's columns past C go to a scratch tile.
using Buf2 = nb::ndarray<float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

nb::object project(In2 x, In3 packed, int64_t C, std::optional<Buf2> out) {
    const int64_t M = static_cast<int64_t>(x.shape(0)), K = static_cast<int64_t>(x.shape(1));
    const int64_t panels = static_cast<int64_t>(packed.shape(0));
    if (static_cast<int64_t>(packed.shape(1)) != K || packed.shape(2) != NR || C < 0 || (C + NR - 1) / NR != panels)
        throw std::invalid_argument("project: packed weights must be [ceil(C/24), K, 24] for x [M, K]");
    if (out && (static_cast<int64_t>(out->shape(0)) != M || static_cast<int64_t>(out->shape(1)) != C))
        throw std::invalid_argument("project: out must be [M, cols]");
    // into `out` when given (a buffer the caller reuses: no fresh pages), else a new array
    float *y = out ? out->data() : new float[std::max<int64_t>(1, M * C)];
    {
        nb::gil_scoped_release release;
        const Kernels kern{has_avx2_fma()};
        const int64_t full = C / NR, rest = C - full * NR;
        std::unique_ptr<float[]> tail(new float[64 * NR]);
        for (int64_t i0 = 0; i0 < M; i0 += 64) {
            const int64_t rows = std::min<int64_t>(64, M - i0);
            const float *a = x.data() + i0 * K;
            if (full) {
                Packed pk;
                pk.K = K, pk.panels = full, pk.cols = full * NR, pk.width = C, pk.view = packed.data();
                kern.gemm(rows, pk, a, K, y + i0 * C, C, true);
            }
            if (rest) {
                Packed pk;
                pk.K = K, pk.panels = 1, pk.cols = rest, pk.width = NR, pk.view = packed.data() + full * K * NR;
                kern.gemm(rows, pk, a, K, tail.get(), NR, true);
                for (int64_t i = 0; i < rows; ++i)
                    std::memcpy(y + (i0 + i) * C + full * NR, tail.get() + i * NR, sizeof(float) * rest);
            }
        }
    }
    if (out) return nb::none();
    auto owner = nb::capsule(y, [](void *q) noexcept { delete[] static_cast<float *>(q); });
    return nb::cast(Out2(y, {static_cast<size_t>(M), static_cast<size_t>(C)}, owner));
}

// ---------------------------------------------------------------------------
// the reverse sweep of the direct LSTM backward (the Scan body of
// onnx_light/onnx_extensions/gradient/_recurrent_direct.py's _lstm_step, recognised by
// onnx_light/runtime/kernels/recurrent_sweep.py, whose numpy twin computes the same)
// ---------------------------------------------------------------------------
using In4 = nb::ndarray<const float, nb::ndim<4>, nb::c_contig, nb::device::cpu>;

// One step s of direction d for every batch row: dpre_s from dh, dc (updated in place to
// dc_s f_s) and the step's gates; the body's products in its order (ONNX gates i, o, f, c).
void sweep_rows(int64_t N, int64_t H, float *dh, float *dc, const float *dy, const float *s, const float *g,
                const float *tc, const float *cp, float *dpre) {
    for (int64_t n = 0; n < N; ++n) {
        const float *sn = s + n * 3 * H, *gn = g + n * H, *tn = tc + n * H, *cpn = cp + n * H;
        float *dhn = dh + n * H, *dcn = dc + n * H, *dp = dpre + n * 4 * H;
        for (int64_t j = 0; j < H; ++j) {
            const float i = sn[j], o = sn[H + j], f = sn[2 * H + j], t = tn[j], gg = gn[j];
            const float dht = dy ? dhn[j] + dy[n * H + j] : dhn[j];
            const float dct = dcn[j] + dht * (o * (1.0f - t * t));
            dp[j] = (dct * gg) * (i * (1.0f - i));
            dp[H + j] = (dht * t) * (o * (1.0f - o));
            dp[2 * H + j] = (dct * cpn[j]) * (f * (1.0f - f));
            dp[3 * H + j] = (dct * i) * (1.0f - gg * gg);
            dcn[j] = dct * f;
        }
    }
}

// (dh, dc, dpre [D, T, N, 4H]) of the reverse sweep from dh0, dc0 [D, N, H]: steps T-1 .. 0 of
// dY [D, T, N, H] (or none), s = sigmoid(i, o, f) [D, T, N, 3H], g = tanh(c gate) [D, T, N, H],
// the cell states c_s and c_{s-1} [D, T, N, H], and R [D, 4H, H]; dh = dpre_s R per step.
using Buf4 = nb::ndarray<float, nb::ndim<4>, nb::c_contig, nb::device::cpu>;

nb::tuple lstm_sweep(In3 dh0, In3 dc0, std::optional<In4> dy, In4 s, In4 g, In4 c, In4 cp, In3 r,
                     std::optional<Buf4> out) {
    auto dim = [](const auto &a, size_t i) { return static_cast<int64_t>(a.shape(i)); };
    const int64_t D = dim(c, 0), T = dim(c, 1), N = dim(c, 2), H = dim(c, 3);
    auto same = [&](const auto &a, int64_t last) {
        return dim(a, 0) == D && dim(a, 1) == T && dim(a, 2) == N && dim(a, 3) == last;
    };
    if (!same(s, 3 * H) || !same(g, H) || !same(cp, H) || (dy && !same(*dy, H)) || dim(r, 0) != D ||
        dim(r, 1) != 4 * H || dim(r, 2) != H || dim(dh0, 0) != D || dim(dh0, 1) != N || dim(dh0, 2) != H ||
        dim(dc0, 0) != D || dim(dc0, 1) != N || dim(dc0, 2) != H)
        throw std::invalid_argument("lstm_sweep: inconsistent shapes");
    if (out && !same(*out, 4 * H)) throw std::invalid_argument("lstm_sweep: out must be [D, T, N, 4H]");
    const size_t state = static_cast<size_t>(D * N * H), rows = static_cast<size_t>(N * H);
    float *dh = new float[std::max<size_t>(1, state)], *dc = new float[std::max<size_t>(1, state)];
    // dpre: into `out` when given (a buffer the caller reuses: no fresh pages), else a new array
    float *dpre = out ? out->data() : new float[std::max<size_t>(1, static_cast<size_t>(T) * state * 4)];
    std::memcpy(dh, dh0.data(), sizeof(float) * state);
    std::memcpy(dc, dc0.data(), sizeof(float) * state);
    {
        nb::gil_scoped_release release;
        const Kernels kern{has_avx2_fma()};
        const Act tanh_act{TANH, 0.0f, 0.0f, -1.0f};
        std::unique_ptr<float[]> tc(new float[rows + 8]);
        for (int64_t d = 0; d < D; ++d) {
            const Packed pk = packed_rows(r.data() + d * 4 * H * H, 4 * H, H, H);
            std::unique_ptr<float[]> acc(new float[N * pk.width + 8]);
            float *dhd = dh + d * N * H, *dcd = dc + d * N * H;
            for (int64_t t = T - 1; t >= 0; --t) {
                const size_t at = static_cast<size_t>(d * T + t) * rows;
                std::memcpy(tc.get(), c.data() + at, sizeof(float) * rows);
                kern.act(tanh_act, tc.get(), static_cast<int64_t>(rows));
                float *dp = dpre + at * 4;
                sweep_rows(N, H, dhd, dcd, dy ? dy->data() + at : nullptr, s.data() + at * 3, g.data() + at, tc.get(),
                           cp.data() + at, dp);
                kern.gemm(N, pk, dp, 4 * H, acc.get(), pk.width, true);
                for (int64_t n = 0; n < N; ++n) std::memcpy(dhd + n * H, acc.get() + n * pk.width, sizeof(float) * H);
            }
        }
    }
    auto owner = [](float *ptr) { return nb::capsule(ptr, [](void *q) noexcept { delete[] static_cast<float *>(q); }); };
    const size_t t_ = static_cast<size_t>(T), d_ = static_cast<size_t>(D), n_ = static_cast<size_t>(N),
                 h_ = static_cast<size_t>(H);
    Out3 dh_arr(dh, {d_, n_, h_}, owner(dh)), dc_arr(dc, {d_, n_, h_}, owner(dc));
    if (out) return nb::make_tuple(dh_arr, dc_arr, nb::none());
    return nb::make_tuple(dh_arr, dc_arr, Out4(dpre, {d_, t_, n_, 4 * h_}, owner(dpre)));
}

// The cell state's forward Scan of the direct LSTM backward (its body: Mul, Add, two Identity):
// c_s = f_s c_{s-1} + (i g)_s for s = 0 .. T-1 from c0 [D, N, H]; f, ig, cs, cps [D, T, N, H];
// writes cs[:, s] = c_s and cps[:, s] = c_{s-1}, returns c_{T-1} (c0 when T is 0). The product,
// then the sum, as the body's two nodes (portable code, no FMA: numpy's floats exactly).
nb::object lstm_cell_states(In3 c0, In4 f, In4 ig, Buf4 cs, Buf4 cps) {
    auto dim = [](const auto &a, size_t i) { return static_cast<int64_t>(a.shape(i)); };
    const int64_t D = dim(f, 0), T = dim(f, 1), N = dim(f, 2), H = dim(f, 3);
    for (int k = 0; k < 4; ++k)
        if (dim(ig, k) != dim(f, k) || dim(cs, k) != dim(f, k) || dim(cps, k) != dim(f, k))
            throw std::invalid_argument("lstm_cell_states: f, ig, cs and cps must have one shape [D, T, N, H]");
    if (dim(c0, 0) != D || dim(c0, 1) != N || dim(c0, 2) != H)
        throw std::invalid_argument("lstm_cell_states: c0 must be [D, N, H]");
    const int64_t rows = N * H;
    float *last = new float[std::max<int64_t>(1, D * rows)];
    {
        nb::gil_scoped_release release;
        for (int64_t d = 0; d < D; ++d) {
            const float *prev = c0.data() + d * rows;
            for (int64_t t = 0; t < T; ++t) {
                const int64_t at = (d * T + t) * rows;
                const float *ft = f.data() + at, *igt = ig.data() + at;
                float *ct = cs.data() + at, *cpt = cps.data() + at;
                for (int64_t j = 0; j < rows; ++j) {
                    const float m = ft[j] * prev[j];
                    cpt[j] = prev[j];
                    ct[j] = m + igt[j];
                }
                prev = ct;
            }
            std::memcpy(last + d * rows, prev, sizeof(float) * rows);
        }
    }
    auto owner = nb::capsule(last, [](void *q) noexcept { delete[] static_cast<float *>(q); });
    return nb::cast(Out3(last, {static_cast<size_t>(D), static_cast<size_t>(N), static_cast<size_t>(H)}, owner));
}

}  // namespace
}  // namespace onnx_light_recurrent

void bind_recurrent(nb::module_ &m) {
    using namespace onnx_light_recurrent;
    m.def("recurrent", &recurrent, nb::arg("op"), nb::arg("xs"), nb::arg("r"), nb::arg("h0"), nb::arg("c0").none(),
          nb::arg("p").none(), nb::arg("rbh").none(), nb::arg("bias").none(), nb::arg("lens"), nb::arg("reverse"), nb::arg("kinds"),
          nb::arg("alphas"), nb::arg("betas"), nb::arg("clip"), nb::arg("input_forget"),
          nb::arg("linear_before_reset"), nb::arg("packed").none() = nb::none(),
          "The step loop of RNN (op 0), GRU (1) or LSTM (2) over the projected inputs xs [T, N, D*G*H] (time order): "
          "(Y [T, D, N, H], last H [D, N, H], last C or None)");
    m.def("pack_recurrent", &pack_recurrent, nb::arg("op"), nb::arg("r"),
          "R [D, G*H, H] of an RNN (op 0), GRU (1) or LSTM (2) packed for recurrent(..., packed)");
    m.def("pack_weights", &pack_weights, nb::arg("w"),
          "W [C, K] packed as the right operand W^T of project: [ceil(C/24), K, 24]");
    m.def("project", &project, nb::arg("x"), nb::arg("packed"), nb::arg("cols"), nb::arg("out").none() = nb::none(),
          "x [M, K] times W^T given packed by pack_weights (W of `cols` rows): [M, cols], or None when "
          "written into out");
    m.def("lstm_cell_states", &lstm_cell_states, nb::arg("c0"), nb::arg("f"), nb::arg("ig"), nb::arg("cs"), nb::arg("cps"),
          "The cell states c_s = f_s c_{s-1} + ig_s of the direct LSTM backward's forward Scan, into cs (c_s) and cps "
          "(c_{s-1}) [D, T, N, H]: the last c [D, N, H]");
    m.def("lstm_sweep", &lstm_sweep, nb::arg("dh"), nb::arg("dc"), nb::arg("dy").none(), nb::arg("s"), nb::arg("g"),
          nb::arg("c"), nb::arg("cp"), nb::arg("r"), nb::arg("out").none() = nb::none(),
          "The reverse sweep of the direct LSTM backward, steps T-1 .. 0: (dh [D, N, H], dc [D, N, H], "
          "dpre [D, T, N, 4H], or None when written into out)");
}
