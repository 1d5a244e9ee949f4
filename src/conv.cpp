// 2-D convolution for float32 NCHW tensors: im2col packed one kc x NR panel of output
// pixels at a time, multiplied by the packed weights in an 8 x 32 register-blocked
// AVX-512 kernel, with the bias and an optional ReLU applied as the tile is stored.
//
// For one sample n and group g, with K = C/g * kh * kw and P = oh * ow:
//     y[n, g*Mg + m, p] = bias[g*Mg + m] + sum_k W[g*Mg + m, k] * cols[k, p]
//     cols[(c, a, b), (i, j)] = x[n, g*Cg + c, i*sh + a*dh - pt, j*sw + b*dw - pl]   (0 outside)
// The driver (run_tiled) blocks like a BLIS GEMM: the panels of a block of pixels are
// packed once per kc rows of K and stay in L2 while every row block of W (kc x MR, in L1)
// runs over all of them, so the full im2col matrix is never written and each weight is
// read from memory once per pixel block. The pure-Python twin is the numpy im2col +
// matmul kernel in onnx_light/runtime/kernels/conv.py; this one runs when the CPU has
// AVX-512F, and its AVX2 + FMA twin (src/conv_avx2.cpp) when it has only those. Depthwise
// weights (one input channel per group) take their own loop (depthwise_run), one FMA per
// tap per vector. Both split their work over `threads` workers (src/thread_pool.h) when asked.
// On AVX-512, windows of more than one tap read every panel in place (run_wrapped: the tile over
// oh x wq virtual pixels of the input's phase planes), maps that 32-pixel panels fill badly take
// a 16 x 16 tile (tile_16x16), and both ISAs run 3x3 stride-1 convolutions with enough channels
// as Winograd F(2x2, 3x3) instead (src/conv_winograd.cpp, by either ISA's tile). On AVX2,
// strided convolutions with a 7x7 window read their panels in place
// from the input split into phase planes (conv.h PhasePlanes). With the weights packed once by
// the caller (conv2d_pack_weights: AVX2, stride 1, >= 8 row blocks) the order turns around: each
// panel (read in place) stays in L1 while every row block's packed weights stream past it.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "conv.h"
#include "simd.h"

#if ONNX_LIGHT_AVX512
// GCC 12's AVX-512 headers seed _mm512_roundscale_ps, _mm512_cvtps_epi32, ... with
// _mm512_undefined_ps(), reported as "used uninitialized"; the value is never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace nb = nanobind;

namespace onnx_light_conv {
namespace {

constexpr int64_t MR = 8;    // output channels per register tile
constexpr int64_t NR = 32;   // output pixels per register tile (two 16-float vectors)
constexpr int64_t KC = 256;  // reduction block: 8 KiB of weights per row block, 32 KiB per panel
constexpr int64_t NARROW_MR = 16, NARROW = 16;  // tile_16x16's rows and pixels
// run_wrapped's pixel blocks: 8 panels (yolo's 3 x 3 convolutions, one process: blocks of 128
// pixels 9.1 ms, 256 8.4, 512 8.8, 1024 9.0)
constexpr int64_t WRAP_BLOCK = 256;

using In4 = nb::ndarray<const float, nb::ndim<4>, nb::c_contig, nb::device::cpu>;
using In1 = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using In3 = nb::ndarray<const float, nb::ndim<3>, nb::c_contig, nb::device::cpu>;
using Out3 = nb::ndarray<nb::numpy, float, nb::ndim<3>>;
using Out1 = nb::ndarray<nb::numpy, float, nb::ndim<1>>;
using Out4 = nb::ndarray<nb::numpy, float, nb::ndim<4>>;

#if ONNX_LIGHT_AVX512
AVX512 inline __mmask16 bits(int64_t lo, int64_t hi) {
    // lanes t of a 16-lane chunk with lo <= t < hi (lo, hi already relative to the chunk)
    lo = std::max<int64_t>(lo, 0);
    hi = std::min<int64_t>(hi, 16);
    if (hi <= lo) return 0;
    return static_cast<__mmask16>(((1u << hi) - 1) & ~((1u << lo) - 1));
}

// TileKernel::pack for this tile: the panel's pixels in runs along an output row; the tap
// (c, a, b) of row k advances with k. Stride-1 runs are masked vector copies, stride-2 runs
// two masked loads and a permute per 16 pixels.
// W: the panel's width (NR, or NARROW for tile_16x16)
template <int64_t W>
AVX512 void pack_cols(const Shape &s, const float *x, int64_t k0, int64_t kc, int64_t p0, float *cols) {
    Run runs[W];
    const int64_t nruns = panel_runs(s, p0, W, runs), kk = s.kh * s.kw;
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    int64_t c = k0 / kk, a = (k0 % kk) / s.kw, b = k0 % s.kw;
    for (int64_t k = k0; k < k0 + kc; ++k) {
        float *dst = cols + (k - k0) * W;
        _mm512_storeu_ps(dst, _mm512_setzero_ps());
        if constexpr (W == 32) _mm512_storeu_ps(dst + 16, _mm512_setzero_ps());
        const float *plane = x + c * s.h * s.w;
        const int64_t dy = a * s.dh - s.pt, dx = b * s.dw - s.pl;
        for (int64_t q = 0; q < nruns; ++q) {
            const Run &r = runs[q];
            const int64_t ih = r.i * s.sh + dy;
            if (ih < 0 || ih >= s.h) continue;
            const float *row = plane + ih * s.w;
            const int64_t first = r.j0 * s.sw + dx;  // input column of the run's pixel 0
            if (s.sw == 1) {
                // pixel t of the run reads row[first + t]; valid for 0 <= first + t < w
                const int64_t lo = std::max<int64_t>(0, -first), hi = std::min(r.len, s.w - first);
                for (int64_t t0 = 0; t0 < r.len; t0 += 16) {
                    const __mmask16 m = bits(lo - t0, hi - t0);
                    if (!m) continue;
                    const __m512 v = _mm512_maskz_loadu_ps(m, row + (first + t0));
                    _mm512_mask_storeu_ps(dst + r.j + t0, m, v);
                }
            } else if (s.sw == 2) {
                // pixel t reads row[first + 2t]: 32 input columns per 16 pixels, even lanes kept
                const int64_t lo = first >= 0 ? 0 : (1 - first) / 2;
                const int64_t hi = std::min(r.len, s.w - first > 0 ? (s.w - first + 1) / 2 : 0);
                for (int64_t t0 = 0; t0 < r.len; t0 += 16) {
                    const __mmask16 m = bits(lo - t0, hi - t0);
                    if (!m) continue;
                    // input lanes u = 2 (t - t0) for valid t: the range [2 (lo - t0), 2 (hi - t0) - 1)
                    const int64_t ulo = 2 * std::max<int64_t>(lo - t0, 0);
                    const int64_t uhi = 2 * std::min<int64_t>(hi - t0, 16) - 1;
                    const float *src = row + (first + 2 * t0);
                    const __m512 va = _mm512_maskz_loadu_ps(bits(ulo, uhi), src);
                    const __m512 vb = _mm512_maskz_loadu_ps(bits(ulo - 16, uhi - 16), src + 16);
                    _mm512_mask_storeu_ps(dst + r.j + t0, m, _mm512_permutex2var_ps(va, even, vb));
                }
            } else {
                copy_strided(row, first, r.len, s.sw, s.w, dst + r.j);
            }
        }
        if (++b == s.kw) {
            b = 0;
            if (++a == s.kh) a = 0, ++c;
        }
    }
}

// acc[r] = sum_k A[r * lda + k] * Bk[0:32] for r < MR, row k of the pixel panel Bk = B + k * NR
// (packed) or, Direct, B + koff[k] (read in place: run_wrapped); rows past `rows` read the last row
template <bool Direct>
AVX512 __attribute__((always_inline)) inline void tile_sums(int64_t kc, const float *A, int64_t lda, const float *B,
                                                            const int64_t *koff, int64_t rows, __m512 (&acc)[MR][2]) {
    const float *a_row[MR];
    for (int r = 0; r < MR; ++r) a_row[r] = A + std::min<int64_t>(r, rows - 1) * lda;
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; ++k) {
        const float *row = Direct ? B + koff[k] : B + k * NR;
        const __m512 b0 = _mm512_loadu_ps(row), b1 = _mm512_loadu_ps(row + 16);
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
            const __m512 a = _mm512_set1_ps(a_row[r][k]);
            acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
        }
    }
}

// C[r, 0:cols] (+)= the sums of tile_sums for r < rows (the extra rows dropped): TileKernel::tile
// (Direct: TileKernel::direct). `first` adds bias[r] instead of reading C; `relu` clamps at zero
// when storing.
template <bool Direct>
AVX512 void tile_8x32(int64_t kc, const float *A, int64_t lda, const float *B, const int64_t *koff, float *C,
                      int64_t ldc, int64_t rows, int64_t cols, const float *bias, bool first, bool relu) {
    const __mmask16 m0 = cols >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << cols) - 1);
    const __mmask16 m1 = cols >= 32 ? 0xFFFF : cols <= 16 ? 0 : static_cast<__mmask16>((1u << (cols - 16)) - 1);
    __m512 acc[MR][2];
    tile_sums<Direct>(kc, A, lda, B, koff, rows, acc);
    const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
        if (r >= rows) break;
        float *c = C + r * ldc;
        __m512 v0, v1;
        if (first) {
            const __m512 add = _mm512_set1_ps(bias ? bias[r] : 0.0f);
            v0 = _mm512_add_ps(acc[r][0], add);
            v1 = _mm512_add_ps(acc[r][1], add);
        } else {
            v0 = _mm512_add_ps(acc[r][0], _mm512_maskz_loadu_ps(m0, c));
            v1 = _mm512_add_ps(acc[r][1], _mm512_maskz_loadu_ps(m1, c + 16));
        }
        if (relu) {
            v0 = _mm512_max_ps(zero, v0);
            v1 = _mm512_max_ps(zero, v1);
        }
        _mm512_mask_storeu_ps(c, m0, v0);
        _mm512_mask_storeu_ps(c + 16, m1, v1);
    }
}

// The narrow tile for small maps, where 32-pixel panels would compute many dropped pixels
// (10 x 10: 128 for 100, 16-pixel panels 112): C[r, 0:cols] (+)= sum_k A[r * lda + k] * Bk[0:cols]
// for r < rows (up to 16), Bk = B + k * NARROW (packed) or, Direct, B + koff[k]; one FMA per
// weight (its broadcast folded in), 16 accumulators. `first` adds bias[r] instead of reading C;
// `relu` clamps at zero when storing.
template <bool Direct>
AVX512 void tile_16x16(int64_t kc, const float *A, int64_t lda, const float *B, const int64_t *koff, float *C,
                       int64_t ldc, int64_t rows, int64_t cols, const float *bias, bool first, bool relu) {
    const __mmask16 m = cols >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << cols) - 1);
    const float *a_row[NARROW_MR];
    for (int r = 0; r < NARROW_MR; ++r) a_row[r] = A + std::min<int64_t>(r, rows - 1) * lda;
    __m512 acc[NARROW_MR];
#pragma GCC unroll 16
    for (int r = 0; r < NARROW_MR; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; ++k) {
        const __m512 b = _mm512_loadu_ps(Direct ? B + koff[k] : B + k * NARROW);
#pragma GCC unroll 16
        for (int r = 0; r < NARROW_MR; ++r) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(a_row[r][k]), b, acc[r]);
    }
    const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int r = 0; r < NARROW_MR; ++r) {
        if (r >= rows) break;
        float *c = C + r * ldc;
        __m512 v = _mm512_add_ps(acc[r], first ? _mm512_set1_ps(bias ? bias[r] : 0.0f) : _mm512_maskz_loadu_ps(m, c));
        if (relu) v = _mm512_max_ps(zero, v);
        _mm512_mask_storeu_ps(c, m, v);
    }
}

// whether `count` pixels (or Winograd tiles) waste 10% fewer computed ones in 16-pixel panels
bool narrow_pays(int64_t count) { return 10 * ((count + NR - 1) / NR * NR) >= 11 * ((count + 15) / 16 * 16); }

// e^x for |x| <= 87: 2^n e^r with n = round(x log2 e), r = x - n ln 2 (in two parts) in
// [-ln2/2, ln2/2], e^r by its degree-7 Taylor polynomial (relative error below 1e-8).
AVX512 inline __m512 exp16(__m512 x) {
    x = _mm512_min_ps(_mm512_set1_ps(87.0f), _mm512_max_ps(_mm512_set1_ps(-87.0f), x));  // NaN stays NaN
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    for (const float c : {1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f})
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

AVX512 inline __m512 activate16(const Epilogue &ep, __m512 v) {
    const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
    switch (ep.act) {
        case ACT_RELU: return _mm512_max_ps(zero, v);
        case ACT_CLIP: return _mm512_min_ps(_mm512_set1_ps(ep.b), _mm512_max_ps(_mm512_set1_ps(ep.a), v));
        case ACT_HARDSWISH: {
            const __m512 g = _mm512_fmadd_ps(v, _mm512_set1_ps(1.0f / 6.0f), _mm512_set1_ps(0.5f));
            return _mm512_mul_ps(v, _mm512_min_ps(one, _mm512_max_ps(zero, g)));
        }
        case ACT_HARDSIGMOID: {
            const __m512 g = _mm512_fmadd_ps(v, _mm512_set1_ps(ep.a), _mm512_set1_ps(ep.b));
            return _mm512_min_ps(one, _mm512_max_ps(zero, g));
        }
        case ACT_SILU: return _mm512_div_ps(v, _mm512_add_ps(one, exp16(_mm512_sub_ps(zero, v))));
        case ACT_SIGMOID: return _mm512_div_ps(one, _mm512_add_ps(one, exp16(_mm512_sub_ps(zero, v))));
        default: return v;
    }
}

// y[i] = act(y[i] + res[i]) with the activation fixed (Act), so that the loop holds no branch
// and consecutive vectors' exponentials overlap (SiLU epilogues of 1 x 1 convolutions: 64 -> 255
// at 40 x 40 0.75 -> 0.66 ms of thread CPU, src/conv_avx2.cpp's epilogue8_act likewise)
template <int Act>
AVX512 void epilogue16_act(const Epilogue &ep, float *y, const float *res, int64_t n) {
    Epilogue fixed = ep;
    fixed.act = Act;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(y + i);
        if (res) v = _mm512_add_ps(v, _mm512_loadu_ps(res + i));
        _mm512_storeu_ps(y + i, activate16(fixed, v));
    }
    if (i < n) {
        const __mmask16 m = bits(0, n - i);
        __m512 v = _mm512_maskz_loadu_ps(m, y + i);
        if (res) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, res + i));
        _mm512_mask_storeu_ps(y + i, m, activate16(fixed, v));
    }
}

// EpilogueFn of this ISA
AVX512 void epilogue16(const Epilogue &ep, float *y, const float *res, int64_t n) {
    switch (ep.act) {
        case ACT_RELU: return epilogue16_act<ACT_RELU>(ep, y, res, n);
        case ACT_CLIP: return epilogue16_act<ACT_CLIP>(ep, y, res, n);
        case ACT_HARDSWISH: return epilogue16_act<ACT_HARDSWISH>(ep, y, res, n);
        case ACT_HARDSIGMOID: return epilogue16_act<ACT_HARDSIGMOID>(ep, y, res, n);
        case ACT_SILU: return epilogue16_act<ACT_SILU>(ep, y, res, n);
        case ACT_SIGMOID: return epilogue16_act<ACT_SIGMOID>(ep, y, res, n);
        default: return epilogue16_act<ACT_NONE>(ep, y, res, n);
    }
}

// Rows [i0, i0 + rows) (rows <= R), columns [jb, jb + 16 * vectors) (vectors <= V) of one
// depthwise output plane: R x V independent FMA chains, so that small maps (7 x 7: one
// vector per row) do not wait on one chain's latency.
template <int R, int V, int S>
AVX512 inline void depthwise_block(const Shape &s, const float *plane, int64_t wp, const float *k, __m512 start,
                                   float *out, int64_t i0, int64_t rows, int64_t jb, int64_t vectors, bool relu) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i steps = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                             _mm512_set1_epi32(static_cast<int>(s.sw)));
    __m512 acc[R][V];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int v = 0; v < V; ++v) acc[r][v] = start;
    for (int64_t a = 0; a < s.kh; ++a)
        for (int64_t b = 0; b < s.kw; ++b) {
            const __m512 kv = _mm512_set1_ps(k[a * s.kw + b]);
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) {
                if (r >= rows) break;
                const float *tap = plane + ((i0 + r) * s.sh + a * s.dh) * wp + jb * s.sw + b * s.dw;
#pragma GCC unroll 8
                for (int v = 0; v < V; ++v) {
                    if (v >= vectors) break;
                    const float *src = tap + 16 * v * s.sw;
                    __m512 in;
                    if constexpr (S == 1) {
                        in = _mm512_loadu_ps(src);
                    } else if constexpr (S == 2) {
                        in = _mm512_permutex2var_ps(_mm512_loadu_ps(src), even, _mm512_loadu_ps(src + 16));
                    } else {
                        in = _mm512_i32gather_ps(steps, src, 4);
                    }
                    acc[r][v] = _mm512_fmadd_ps(kv, in, acc[r][v]);
                }
            }
        }
    const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        if (r >= rows) break;
#pragma GCC unroll 8
        for (int v = 0; v < V; ++v) {
            if (v >= vectors) break;
            const int64_t j0 = jb + 16 * v;
            const __m512 o = relu ? _mm512_max_ps(zero, acc[r][v]) : acc[r][v];
            _mm512_mask_storeu_ps(out + (i0 + r) * s.ow + j0, bits(0, s.ow - j0), o);
        }
    }
}

// Output rows [i, i + rows) of one depthwise plane (vr vectors per row) with S the column
// stride (1, 2, or 0 for any other: gathers).
template <int S>
AVX512 inline void depthwise_rows(const Shape &s, const float *plane, int64_t wp, const float *k, __m512 start, float *out,
                            int64_t i, int64_t rows, int64_t vr, bool relu) {
    if (vr <= 1) return depthwise_block<8, 1, S>(s, plane, wp, k, start, out, i, rows, 0, vr, relu);
    if (vr == 2) return depthwise_block<4, 2, S>(s, plane, wp, k, start, out, i, rows, 0, vr, relu);
    if (vr <= 4) return depthwise_block<2, 4, S>(s, plane, wp, k, start, out, i, rows, 0, vr, relu);
    for (int64_t jb = 0; jb < s.ow; jb += 128)
        depthwise_block<1, 8, S>(s, plane, wp, k, start, out, i, 1, jb, std::min<int64_t>(8, (s.ow - jb + 15) / 16), relu);
}

// The output planes of input plane c of sample n (`pad` this worker's bordered buffer).
AVX512 void depthwise_run_plane(const Shape &s, PaddedPlanes &pad, const float *x, const float *w, const float *bias,
                                const Epilogue &ep, float *y, int64_t n, int64_t c) {
    const int64_t mult = s.m / s.group, P = s.oh * s.ow, taps = s.kh * s.kw;
    const int64_t vr = (s.ow + 15) / 16;  // vectors per output row
    const bool relu = ep.tile_relu(), post = ep.post();
    const float *plane = pad.fill(s, x + (n * s.c + c) * s.h * s.w, 1);
    for (int64_t m = c * mult; m < (c + 1) * mult; ++m) {
        const float *k = w + m * taps;
        float *out = y + (n * s.m + m) * P;
        const __m512 start = _mm512_set1_ps(bias ? bias[m] : 0.0f);
        const int64_t R = vr <= 1 ? 8 : vr == 2 ? 4 : vr <= 4 ? 2 : 1;
        for (int64_t i = 0; i < s.oh; i += R) {
            const int64_t rows = std::min(R, s.oh - i);
            if (s.sw == 1) depthwise_rows<1>(s, plane, pad.wp, k, start, out, i, rows, vr, relu);
            else if (s.sw == 2) depthwise_rows<2>(s, plane, pad.wp, k, start, out, i, rows, vr, relu);
            else depthwise_rows<0>(s, plane, pad.wp, k, start, out, i, rows, vr, relu);
            if (post)
                for (int64_t r = i; r < i + rows; ++r) {
                    float *row = out + r * s.ow;
                    epilogue16(ep, row, ep.residual ? ep.residual + (row - y) : nullptr, s.ow);
                }
        }
    }
}

// Depthwise weights (one input channel per group, `mult` output channels each): every
// output plane is its input plane filtered by one kh x kw kernel. Each input plane is
// copied into the middle of a zero-bordered buffer (borders zeroed once), so every tap
// is an unmasked load (stride 1), two loads and a permute (stride 2) or a gather. Rows of
// up to 16 columns go 8 at a time, of 32 four, of 64 two; wider rows 128 columns at a time.
AVX512 void depthwise_run(const Shape &s, const float *x, const float *w, const float *bias, const Epilogue &ep,
                          float *y,
                          int threads) {
    const int64_t planes = s.n * s.c, vr = (s.ow + 15) / 16;
    threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, planes)));
    std::vector<PaddedPlanes> pads;  // one bordered buffer per worker
    for (int t = 0; t < threads; ++t) pads.emplace_back(s, 1, vr * 16 * s.sw + (s.kw - 1) * s.dw + 16, true);
    // runs of planes of at least ~16k multiply-adds
    const int64_t least = 16384 / std::max<int64_t>(1, s.oh * s.ow * s.kh * s.kw * (s.m / s.group));
    parallel_runs(threads, planes, least, [&](int worker, int64_t i) {
        depthwise_run_plane(s, pads[worker], x, w, bias, ep, y, i / s.c, i % s.c);
    });
}

// Whether run_wrapped takes this geometry: windows of more than one tap (a 1 x 1 reads its input
// rows in place as they are), one input channel per group excepted (depthwise_run), and at most
// 10% more panels over the virtual pixels than over the output's (one process vs packed panels:
// crnn's 128 -> 256 3 x 3 at 4 x 40, 6 panels for 5, 1.33x the time); stride 1 with fewer than 32
// multiply-adds per output excepted too, where packing is cheap beside the tile's stores (the
// bench conv net's 3 -> 32 3 x 3 at 64 x 64, batch 16: 1.08x the time in place)
bool wrapped_pays(const Shape &s) {
    if (s.kh * s.kw == 1 || s.c / s.group == 1) return false;
    if (s.sh == 1 && s.sw == 1 && s.c / s.group * s.kh * s.kw < 32) return false;
    const int64_t width = std::max(s.pl + s.w, (s.ow - 1) * s.sw + (s.kw - 1) * s.dw + 1);
    const int64_t wq = (width + s.sw - 1) / s.sw, Q = (s.oh - 1) * wq + s.ow;
    return 10 * ((Q + NR - 1) / NR) <= 11 * ((s.oh * s.ow + NR - 1) / NR);
}

// Where a panel of run_wrapped's virtual pixels lands in an output plane: per 16-lane half, the
// lanes of real pixels (column j < ow, before the last), the plane offset of the first of them
// (real pixels in order are consecutive cells) and the mask of as many low lanes
struct WrappedPanel {
    __mmask16 real[2], low[2];
    int64_t at[2];
    WrappedPanel(const Shape &s, int64_t wq, int64_t Q, int64_t q) {
        for (int h = 0; h < 2; ++h) {
            unsigned m = 0, count = 0;
            at[h] = 0;
            for (int t = 0; t < 16; ++t) {
                const int64_t v = q + 16 * h + t;
                if (v >= Q || v % wq >= s.ow) continue;
                if (!count) at[h] = v / wq * s.ow + v % wq;
                m |= 1u << t, ++count;
            }
            real[h] = static_cast<__mmask16>(m), low[h] = static_cast<__mmask16>((1u << count) - 1);
        }
    }
};

// tile_sums over a panel read in place, then per row r < rows: + bias[r] (`first`) or + C (the
// block buffer, ldc floats per row: the earlier reduction blocks); stored to C unless `last`,
// where the real pixels are packed together (WrappedPanel), + residual, the activation, and stored
// into output plane r (out + r P; res likewise, or null)
AVX512 void tile_wrapped(int64_t kc, const float *A, int64_t lda, const float *B, const int64_t *koff, float *C,
                         int64_t ldc, int64_t rows, const float *bias, bool first, bool last, const WrappedPanel &wp,
                         const Epilogue &ep, float *out, const float *res, int64_t P) {
    __m512 acc[MR][2];
    tile_sums<true>(kc, A, lda, B, koff, rows, acc);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
        if (r >= rows) break;
        float *c = C + r * ldc;
        __m512 v[2];
        for (int h = 0; h < 2; ++h) {
            const __m512 add = first ? _mm512_set1_ps(bias ? bias[r] : 0.0f) : _mm512_loadu_ps(c + 16 * h);
            v[h] = _mm512_add_ps(acc[r][h], add);
        }
        for (int h = 0; h < 2; ++h) {
            if (!last) {
                _mm512_storeu_ps(c + 16 * h, v[h]);
                continue;
            }
            if (!wp.real[h]) continue;
            const int64_t at = r * P + wp.at[h];
            __m512 u = _mm512_maskz_compress_ps(wp.real[h], v[h]);
            if (res) u = _mm512_add_ps(u, _mm512_maskz_loadu_ps(wp.low[h], res + at));
            _mm512_mask_storeu_ps(out + at, wp.low[h], activate16(ep, u));
        }
    }
}

// The convolution with every panel read in place (no packing): the input split into phase planes
// (conv.h PhasePlanes; stride 1: one zero-bordered copy) of wq cells per row, where output pixel
// (i, j) reads tap k = (c, a, b) at koff[k] + i wq + j. Numbered q = i wq + j (j < wq), the pixels
// of every tap are consecutive, so that any 32 of them are a panel at koff[k] + q: the register
// tile runs over the virtual map of oh x wq pixels (the wq - ow columns of each row past the
// output's are computed and dropped: 5% at 40 x 40, 17% at 10 x 10), its last reduction block
// storing the real ones with the residual and activation (tile_wrapped); the earlier blocks' sums
// wait in a block buffer. Items as run_tiled's: (sample, group, pixel block), and the weight rows
// when they are few.
AVX512 void run_wrapped(const Shape &s, const float *x, const float *w, const float *bias, const Epilogue &ep,
                        float *y, int threads) {
    const int64_t cg = s.c / s.group, mg = s.m / s.group, K = cg * s.kh * s.kw, P = s.oh * s.ow;
    const int64_t width = (s.ow - 1) * s.sw + (s.kw - 1) * s.dw + 1;  // bordered columns read
    // the dropped pixels past the last row read up to NR + the window's width past the planes
    // one sample at a time, so that its phase planes stay in cache while the tile reads them
    const Shape one = {1, s.c, s.h, s.w, s.m, s.kh, s.kw, s.sh, s.sw, s.dh, s.dw, s.pt, s.pl, s.oh, s.ow, s.group};
    PhasePlanes ph(one, s.c, width, 2 * NR + (s.kw - 1) * s.dw + 16, 0);
    const int64_t wq = ph.wq, Q = (s.oh - 1) * wq + s.ow;  // the virtual pixels up to the last output
    const int64_t kblocks = (K + KC - 1) / KC, kc = (K + kblocks - 1) / kblocks, mblocks = (mg + MR - 1) / MR;
    const int64_t panels = (Q + NR - 1) / NR;
    int64_t per = std::min(panels, std::max<int64_t>(4, WRAP_BLOCK / NR));  // panels per pixel block
    if (threads > 1 && s.group * ((panels + per - 1) / per) < 8 * threads) {
        const int64_t want = (8 * threads + s.group - 1) / s.group;
        per = std::max<int64_t>(std::min<int64_t>(per, 4), (panels + want - 1) / want);
    }
    const int64_t pblocks = (panels + per - 1) / per, blocks = s.group * pblocks;
    const int64_t mchunks =
        threads > 1 && blocks < 6 * threads ? std::min(mblocks, (6 * threads + blocks - 1) / blocks) : 1;
    const int64_t items = blocks * mchunks, nc = per * NR;
    threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, items)));
    const int64_t rows_per = (mblocks + mchunks - 1) / mchunks * MR;  // a chunk's block rows, at most
    float *ybuf = kblocks > 1 ? thread_scratch(1, static_cast<size_t>(threads * rows_per * nc)) : nullptr;
    for (int64_t n = 0; n < s.n; ++n) {
        fill_phases(ph, one, x + n * s.c * s.h * s.w, s.c, threads);
        parallel_items(threads, items, [&](int worker, int64_t item) {
            const int64_t mc = item % mchunks, block = item / mchunks, pb = block % pblocks, g = block / pblocks;
            const int64_t mb0 = mc * mblocks / mchunks, mb1 = (mc + 1) * mblocks / mchunks;
            const int64_t q0 = pb * nc, np = (std::min(nc, Q - q0) + NR - 1) / NR;
            const float *xq = ph.buf.get() + g * cg * ph.plane_floats() + q0;
            const float *wg = w + g * mg * K, *gbias = bias ? bias + g * mg : nullptr;
            const int64_t plane0 = (n * s.m + g * mg) * P;  // the group's first output plane
            float *yb = ybuf ? ybuf + worker * rows_per * nc : nullptr;
            std::vector<WrappedPanel> where;
            where.reserve(static_cast<size_t>(np));
            for (int64_t j = 0; j < np; ++j) where.emplace_back(s, wq, Q, q0 + j * NR);
            int64_t koff[KC];
            for (int64_t k0 = 0; k0 < K; k0 += kc) {
                const int64_t kn = std::min(kc, K - k0);
                ph.tap_offsets(s, k0, kn, koff);
                const bool first = k0 == 0, last = k0 + kn == K;
                for (int64_t mb = mb0; mb < mb1; ++mb) {
                    const int64_t rows = std::min(MR, mg - mb * MR), at = plane0 + mb * MR * P;
                    const float *A = wg + mb * MR * K + k0, *mbias = gbias ? gbias + mb * MR : nullptr;
                    float *C = yb ? yb + (mb - mb0) * MR * nc : nullptr;
                    for (int64_t j = 0; j < np; ++j)
                        tile_wrapped(kn, A, K, xq + j * NR, koff, C ? C + j * NR : nullptr, nc, rows, mbias, first,
                                     last, where[j], ep, y + at, ep.residual ? ep.residual + at : nullptr, P);
                }
            }
        });
    }
}

}  // namespace

AVX512 void epilogue_avx512(const Epilogue &ep, float *y, const float *res, int64_t n) {
    epilogue16(ep, y, res, n);
}

AVX512 void run_avx512(const Shape &s, const float *x, const float *w, const float *bias, const Epilogue &ep,
                       float *y, int threads, const float *winograd, const float *) {
    const int64_t cg = s.c / s.group, mg = s.m / s.group;
    // one input channel per group and few outputs each (more fill the register tile's rows)
    if (cg == 1 && s.group > 1 && 2 * mg <= MR) return depthwise_run(s, x, w, bias, ep, y, threads);
    static const TileKernel kernel{MR, NR, KC, tile_8x32<false>, pack_cols<NR>, epilogue16};
    static const TileKernel narrow{NARROW_MR, NARROW, KC, tile_16x16<false>, pack_cols<NARROW>, epilogue16};
    if (winograd_applies(s, winograd)) {
        // the Winograd driver's 16 GEMMs by a tile reading their rows in place (the driver's
        // fallback, run_tiled, packs as `kernel` does: no bordered input for a null pack_padded)
        static const TileKernel in_place{MR,         NR,      KC, tile_8x32<false>, pack_cols<NR>,
                                         epilogue16, nullptr, tile_8x32<true>};
        static const TileKernel narrow_in_place{NARROW_MR, NARROW,     KC, tile_16x16<false>, pack_cols<NARROW>,
                                                epilogue16, nullptr, tile_16x16<true>};
        const bool small = narrow_pays(((s.oh + 1) / 2) * ((s.ow + 1) / 2));
        return run_winograd_avx2(small ? narrow_in_place : in_place, s, x, w, winograd, bias, ep, y, threads);
    }
    if (narrow_pays(s.oh * s.ow)) return run_tiled(narrow, s, x, w, bias, ep, y, threads);
    if (wrapped_pays(s)) return run_wrapped(s, x, w, bias, ep, y, threads);
    run_tiled(kernel, s, x, w, bias, ep, y, threads);
}
#else
}  // namespace
void run_avx512(const Shape &, const float *, const float *, const float *, const Epilogue &, float *, int,
                const float *, const float *) {}
void epilogue_avx512(const Epilogue &, float *, const float *, int64_t) {}
#endif  // ONNX_LIGHT_AVX512

namespace {

constexpr int64_t BLOCK_FLOATS = 48 * 1024;  // packed panels of one pixel block: 192 KiB, half an L2
constexpr int64_t MAX_KC = 512, MAX_PANELS = BLOCK_FLOATS / 16 + 1;  // bounds of TileKernel::kc and of nc / nr

// The work items of run_tiled: (sample, group, pixel block of nc, weight row chunk); K in
// blocks of equal size kc <= t.kc.
struct TiledPlan {
    bool pointwise;  // 1x1, stride 1, no pads: the panels are plain copies of the input
    int64_t cg, mg, K, P, mblocks, kc, nc, pblocks, mchunks, items;
    // weight rows split (threads > 1 only): the pixel blocks' panels are packed once, by a first
    // pass of the workers, into one buffer that every chunk reads (instead of each chunk packing)
    bool shared = false;
    TiledPlan(const TileKernel &t, const Shape &s, int threads)
        : pointwise(s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.oh == s.h && s.ow == s.w && !s.pt && !s.pl),
          cg(s.c / s.group), mg(s.m / s.group), K(cg * s.kh * s.kw), P(s.oh * s.ow),
          mblocks((mg + t.mr - 1) / t.mr), kc((K + (K + t.kc - 1) / t.kc - 1) / ((K + t.kc - 1) / t.kc)),
          nc(std::min(std::max<int64_t>(1, BLOCK_FLOATS / kc / t.nr), (P + t.nr - 1) / t.nr) * t.nr),
          pblocks((P + nc - 1) / nc), mchunks(1) {
        // threaded, fewer than 8 items per thread: smaller pixel blocks (whole panels: the same
        // panels, so the same bits), but of at least 4 panels (each weight block in L1 serves 4
        // panels: blocks of one panel read the weights 4 times as often, and a 512 -> 512 3 x 3
        // at 7 x 7 in 4 one-panel blocks summed 2x the one-thread time); then, with fewer than 6
        // blocks per thread, the weight rows are split too
        if (threads > 1 && s.n * s.group * pblocks < 8 * threads) {
            const int64_t want = (8 * threads + s.n * s.group - 1) / (s.n * s.group);
            const int64_t least = std::min(nc, 4 * t.nr);
            nc = std::max(least, ((P + want - 1) / want + t.nr - 1) / t.nr * t.nr);
            pblocks = (P + nc - 1) / nc;
        }
        const int64_t blocks = s.n * s.group * pblocks;
        if (threads > 1 && blocks < 6 * threads)
            mchunks = std::min(mblocks, (6 * threads + blocks - 1) / blocks);
        shared = mchunks > 1;
        items = blocks * mchunks;
    }
    int64_t kblocks() const { return (K + kc - 1) / kc; }
};

// Where the pixel block of item `item` lies: sample n, group g, pixels [p0, p0 + len) in
// `panels` panels (origin[j]: panel j's first cell read in place from the bordered input (stride
// 1) or its phase planes (strided), null for a packed panel), weight row blocks [mb0, mb1)
struct TiledBlock {
    int64_t block, n, g, mb0, mb1, p0, len, panels;
    bool any_in_place;  // some panel read in place (a 1 x 1's: all full ones)
    const float *xg, *xp, *xq;
    const float *origin[MAX_PANELS];
    TiledBlock(const TileKernel &t, const TiledPlan &q, const Shape &s, const float *x, const PaddedPlanes *pad,
               const PhasePlanes *ph, int64_t item) {
        const int64_t mc = item % q.mchunks, pb = item / q.mchunks % q.pblocks;
        block = item / q.mchunks, g = block / q.pblocks % s.group, n = block / q.pblocks / s.group;
        mb0 = mc * q.mblocks / q.mchunks, mb1 = (mc + 1) * q.mblocks / q.mchunks;
        p0 = pb * q.nc, len = std::min(q.nc, q.P - p0), panels = (len + t.nr - 1) / t.nr;
        xg = x + (n * s.c + g * q.cg) * s.h * s.w;
        xp = pad ? pad->buf.get() + (n * s.c + g * q.cg) * pad->hp * pad->wp : nullptr;
        xq = ph ? ph->buf.get() + (n * s.c + g * q.cg) * ph->plane_floats() : nullptr;
        any_in_place = false;
        // a 1 x 1's full panels read in place from the input rows when few weight row blocks
        // would share a packed copy (conv2d alone, in place vs packed, one process: 16 -> 16 @ 80 x 80
        // 0.16 vs 0.20 ms, 32 -> 32 0.32 vs 0.33; more outputs lose: 64 -> 255 @ 40 x 40 1.08 vs
        // 0.80, 256 -> 64 @ 56 2.95 vs 1.98)
        const bool pointwise_in_place = t.direct && q.pointwise && q.mblocks <= 6;
        for (int64_t j = 0; j < panels; ++j) {
            const int64_t p = p0 + j * t.nr, i = p / s.ow, j0 = p % s.ow;
            const bool in_place = t.direct && ((pad && s.sw == 1) || ph) && j0 + t.nr <= s.ow && p + t.nr <= q.P;
            origin[j] = in_place ? (ph ? xq + i * ph->wq + j0 : xp + i * s.sh * pad->wp + j0)
                        : pointwise_in_place && p + t.nr <= q.P ? xg + p
                                                                : nullptr;
            any_in_place = any_in_place || origin[j];
        }
    }
    // rows [k0, k0 + kc) of the block's panels not read in place, into cols (kc x nr per panel)
    void pack(const TileKernel &t, const TiledPlan &q, const Shape &gs, const PaddedPlanes *pad,
              const PhasePlanes *ph, int64_t k0, int64_t kc, float *cols) const {
        if (q.pointwise) {
            // the panels not read in place: all, or the last (partial) one
            const int64_t from = any_in_place ? panels - 1 : 0;
            if (!origin[from])
                pack_pointwise(xg, q.P, k0, kc, p0 + from * t.nr, len - from * t.nr, t.nr, cols + from * kc * t.nr);
            return;
        }
        int64_t koff[MAX_KC];
        if (t.pack_block && !pad && !ph) return t.pack_block(gs, xg, k0, kc, p0, len, cols);
        if (ph) ph->tap_offsets(gs, k0, kc, koff);
        for (int64_t j = 0; j < panels; ++j)
            if (ph && !origin[j])
                pack_phased(gs, xq, ph->wq, koff, kc, p0 + j * t.nr, t.nr, cols + j * kc * t.nr);
            else if (pad && !origin[j])
                t.pack_padded(gs, xp, pad->hp, pad->wp, k0, kc, p0 + j * t.nr, cols + j * kc * t.nr);
            else if (!pad && !ph)
                t.pack(gs, xg, k0, kc, p0 + j * t.nr, cols + j * kc * t.nr);
    }
};

// One kc block of tiled_item with the group's weights packed (wpg: pack_weights): panel by
// panel, every row block of the item
void packed_weights_item(const TileKernel &t, const TiledPlan &q, const TiledBlock &b, const float *wpg,
                         const float *gbias, float *yg, const float *panel, const int64_t *koff, int64_t k0,
                         int64_t kc, bool first, bool relu) {
    for (int64_t j = 0; j < b.panels; ++j) {
        const int64_t ncols = std::min(t.nr, b.len - j * t.nr);
        for (int64_t mb = b.mb0; mb < b.mb1; ++mb) {
            const int64_t rows = std::min(t.mr, q.mg - mb * t.mr);
            const float *A = wpg + mb * t.mr * q.K + k0 * rows, *mbias = gbias ? gbias + mb * t.mr : nullptr;
            float *C = yg + mb * t.mr * q.P + j * t.nr;
            if (b.origin[j])
                t.direct_packed(kc, A, rows, b.origin[j], koff, C, q.P, rows, ncols, mbias, first, relu);
            else
                t.tile_packed(kc, A, rows, panel + j * kc * t.nr, nullptr, C, q.P, rows, ncols, mbias, first, relu);
        }
    }
}

// One work item of run_tiled: the block's pixels times weight row blocks [mb0, mb1); `cols`
// holds the block's packed panels of one kc block (packed here), or `packed` all of them (K nc
// floats, rows [k0, k0 + kc) at packed + k0 nc: TiledPlan::shared)
void tiled_item(const TileKernel &t, const TiledPlan &q, const Shape &s, const Shape &gs, const float *x,
                const PaddedPlanes *pad, const PhasePlanes *ph, const float *w, const float *bias, const Epilogue &ep,
                float *y, int64_t item, float *cols, const float *packed, const float *wpacked) {
    const TiledBlock b(t, q, s, x, pad, ph, item);
    const float *wg = w + b.g * q.mg * q.K, *gbias = bias ? bias + b.g * q.mg : nullptr;
    float *yg = y + (b.n * s.m + b.g * q.mg) * q.P + b.p0;
    const bool relu = ep.tile_relu();
    // the weights packed (pack_weights: the caller keeps them), stride 1 (panels read in place
    // from the bordered input: tap rows scattered over the planes) and several row blocks over
    // several panels: panel by panel (the panel's lines stay in L1) every row block streams its
    // packed weights past it; the same products summed in the same order, so the same bits.
    // Strided panels (packed, contiguous) gain nothing (one process, 41 runs, load 8: 64 -> 128
    // 3x3/2 @40 1.00x, 128 -> 256 @20 0.90-1.13x)
    const bool pack_w = wpacked && t.tile_packed && pad && s.sh == 1 && s.sw == 1 && !q.pointwise &&
                        b.mb1 - b.mb0 > 1 && b.panels > 1;
    const float *wpg = pack_w ? wpacked + b.g * q.mg * q.K : nullptr;
    int64_t koff[MAX_KC];  // tap offsets of rows [k0, k0 + kc) in the bordered or phase planes
    for (int64_t k0 = 0; k0 < q.K; k0 += q.kc) {
        const int64_t kc = std::min(q.kc, q.K - k0);
        const float *panel = packed ? packed + k0 * q.nc : cols;
        if (!packed) b.pack(t, q, gs, pad, ph, k0, kc, cols);
        if (ph) ph->tap_offsets(s, k0, kc, koff);
        else if (pad) pad->tap_offsets(s, k0, kc, koff);
        else if (b.any_in_place)  // pointwise: row k of the input planes
            for (int64_t k = 0; k < kc; ++k) koff[k] = (k0 + k) * q.P;
        const bool first = k0 == 0, last = k0 + kc == q.K;
        if (pack_w) {
            packed_weights_item(t, q, b, wpg, gbias, yg, panel, koff, k0, kc, first, relu && last);
            continue;
        }
        for (int64_t mb = b.mb0; mb < b.mb1; ++mb) {
            const int64_t rows = std::min(t.mr, q.mg - mb * t.mr);
            const float *A = wg + mb * t.mr * q.K + k0, *mbias = gbias ? gbias + mb * t.mr : nullptr;
            for (int64_t j = 0; j < b.panels; ++j) {
                float *C = yg + mb * t.mr * q.P + j * t.nr;
                const int64_t ncols = std::min(t.nr, b.len - j * t.nr);
                if (b.origin[j])
                    t.direct(kc, A, q.K, b.origin[j], koff, C, q.P, rows, ncols, mbias, first, relu && last);
                else
                    t.tile(kc, A, q.K, panel + j * kc * t.nr, nullptr, C, q.P, rows, ncols, mbias, first, relu && last);
            }
        }
    }
    if (ep.post())  // the residual and activation while the block's rows are still in cache
        for (int64_t r = b.mb0 * t.mr; r < std::min(b.mb1 * t.mr, q.mg); ++r) {
            float *c = yg + r * q.P;
            t.epilogue(ep, c, ep.residual ? ep.residual + (c - y) : nullptr, b.len);
        }
}

}  // namespace

bool packs_weights(bool avx2, int64_t mg, int64_t kh, int64_t kw) {
    return avx2 && (kh > 1 || kw > 1) && mg >= (PACK_MIN_BLOCKS - 1) * AVX2_MR + 1;
}

void pack_weights(const float *wg, int64_t mg, int64_t K, int64_t mr, float *out) {
    for (int64_t r0 = 0; r0 < mg; r0 += mr) {
        const int64_t rows = std::min(mr, mg - r0);
        float *dst = out + r0 * K;
        for (int64_t r = 0; r < rows; ++r) {
            const float *src = wg + (r0 + r) * K;
            for (int64_t k = 0; k < K; ++k) dst[k * rows + r] = src[k];
        }
    }
}

float *thread_scratch(int slot, size_t n) {
    thread_local std::unique_ptr<float[]> buffers[2];
    thread_local size_t sizes[2] = {0, 0};
    if (slot < 0 || slot > 1) throw std::invalid_argument("thread_scratch: slot must be 0 or 1");
    if (sizes[slot] < n || !buffers[slot]) {
        buffers[slot].reset();
        buffers[slot].reset(new float[n ? n : 1]);
        sizes[slot] = n;
    }
    return buffers[slot].get();
}

void run_tiled(const TileKernel &t, const Shape &s, const float *x, const float *w, const float *bias,
               const Epilogue &ep, float *y, int threads, const float *wpacked) {
    const TiledPlan q(t, s, threads);
    threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, q.items)));
    const Shape gs = {s.n, q.cg, s.h, s.w, q.mg, s.kh, s.kw, s.sh, s.sw, s.dh, s.dw, s.pt, s.pl, s.oh, s.ow, 1};
    const int64_t per = q.kc * q.nc;  // one worker's packed panels
    float *cols = thread_scratch(1, static_cast<size_t>(threads * per));
    // the whole input zero-bordered once (all samples and channels), when the ISA packs from it
    std::unique_ptr<PaddedPlanes> pad;
    std::unique_ptr<PhasePlanes> ph;
    if (t.direct && (s.sh > 1 || s.sw > 1) && s.kh * s.kw >= 49) {
        // strided with a large window (a stem's 7 x 7 / 2), with an in-place tile: the phase
        // planes, so that whole panels are read in place (bench_conv.py: ResNet-18's stem 60 vs
        // 49 GFLOP/s packed; 3 x 3 / 2 and 1 x 1 / 2 lose: 38 vs 50 at 64 -> 128 @ 56, 11 vs 27)
        ph.reset(new PhasePlanes(s, s.n * s.c, TileKernel::padded_width(s)));
        fill_phases(*ph, s, x, s.n * s.c, threads);
    } else if (t.pack_padded && !q.pointwise && (s.sw == 1 || s.sw == 2) &&
               !(t.pack_block && (s.sw == 2 || s.ow < t.nr))) {
        // pack_block reads the input as it is: the bordered copy only for panels read in place
        // (one process, raw vs copied: yolo's 16 -> 32 3x3/2 @160 2.32 vs 2.59 ms, 32 -> 64 @80
        // 1.20 vs 1.38; 512 -> 512 3x3 @7x7 4.85 vs 5.21)
        pad.reset(new PaddedPlanes(s, s.n * s.c, TileKernel::padded_width(s), true, 0));
        fill_planes(*pad, s, x, s.n * s.c, threads);
    }
    std::unique_ptr<float[]> packed;  // TiledPlan::shared: every block's panels, K nc floats each
    if (q.shared) {
        const int64_t blocks = q.items / q.mchunks, kb = q.kblocks();
        packed.reset(new float[blocks * q.K * q.nc]);
        parallel_items(threads, blocks * kb, [&](int, int64_t i) {
            const int64_t block = i / kb, k0 = i % kb * q.kc;
            const TiledBlock b(t, q, s, x, pad.get(), ph.get(), block * q.mchunks);
            b.pack(t, q, gs, pad.get(), ph.get(), k0, std::min(q.kc, q.K - k0), packed.get() + (block * q.K + k0) * q.nc);
        });
    }
    parallel_items(threads, q.items, [&](int worker, int64_t i) {
        const float *shared = packed ? packed.get() + i / q.mchunks * q.K * q.nc : nullptr;
        tiled_item(t, q, s, gs, x, pad.get(), ph.get(), w, bias, ep, y, i, cols + worker * per, shared, wpacked);
    });
}

namespace {

// The widest kernel this CPU runs: "avx512", "avx2" (with FMA) or "" (none: numpy's turn).
const char *best_isa() { return has_avx512f() ? "avx512" : has_avx2_fma() ? "avx2" : ""; }
bool conv2d_supported() { return *best_isa() != 0; }

// The kernel conv2d runs when no isa is named: AVX2 wherever the CPU has it, AVX-512 only when
// asked for. Only the AVX2 driver has Winograd F(2x2, 3x3), packed weights, tap-row packing and
// phase-plane depthwise planes; on AMD Zen 4 (AVX-512 executed on 256-bit units) it ran every
// real model's convolutions faster than the 8 x 32 AVX-512 tile, and let the threaded
// splits of src/conv.h run where the AVX-512 policy sent small maps to one-thread BLAS
// (benchmarks/bench_threads.py --amdahl: resnet18 1 thread 55 -> 46 ms thread CPU, serial part
// with 2 threads 32% -> 4%). A CPU with two 512-bit FMA units was not measured.
const char *default_isa() { return has_avx2_fma() ? "avx2" : best_isa(); }

using OutBuf = nb::ndarray<float, nb::ndim<4>, nb::c_contig, nb::device::cpu>;

// Whether `out` (conv2d's optional argument: a buffer of the runtime's pool) is a writeable
// C-contiguous float32 array of exactly the output's shape (taken as `lent`, no conversion);
// anything else (None, another dtype, shape or layout, read-only) is ignored: conv2d allocates
// and so is one that overlaps an input (`ins`: 4 arrays of `ins_size` floats, null when absent)
bool takes_out(nb::handle out, const Shape &s, OutBuf &lent, const float *const *ins, const size_t *ins_size) {
    if (!out.is_valid() || out.is_none() || !nb::try_cast(out, lent, false)) return false;
    if (static_cast<int64_t>(lent.shape(0)) != s.n || static_cast<int64_t>(lent.shape(1)) != s.m ||
        static_cast<int64_t>(lent.shape(2)) != s.oh || static_cast<int64_t>(lent.shape(3)) != s.ow)
        return false;
    const auto lo = reinterpret_cast<uintptr_t>(lent.data()), hi = lo + lent.size() * sizeof(float);
    for (int i = 0; i < 4; ++i) {
        const auto a = reinterpret_cast<uintptr_t>(ins[i]), e = a + ins_size[i] * sizeof(float);
        if (ins[i] && ins_size[i] && a < hi && lo < e) return false;
    }
    return true;
}

nb::object conv2d(In4 x, In4 w, std::optional<In1> b, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pt,
            int64_t pl, int64_t pb, int64_t pr, int64_t group, bool relu, const std::string &isa, int act, float a,
            float act_b, std::optional<In4> residual, int threads, std::optional<In3> winograd, nb::handle out,
            std::optional<In1> packed) {
    const std::string use = isa.empty() ? default_isa() : isa;
    if (use == "avx512" ? !has_avx512f() : use == "avx2" ? !has_avx2_fma() : true)
        throw std::invalid_argument("conv2d: this CPU cannot run isa '" + use + "' (best: '" + best_isa() + "')");
    Shape s{};
    s.n = x.shape(0), s.c = x.shape(1), s.h = x.shape(2), s.w = x.shape(3);
    s.m = w.shape(0), s.kh = w.shape(2), s.kw = w.shape(3);
    s.sh = sh, s.sw = sw, s.dh = dh, s.dw = dw, s.pt = pt, s.pl = pl, s.group = group;
    if (group <= 0 || s.c % group || s.m % group || static_cast<int64_t>(w.shape(1)) != s.c / group)
        throw std::invalid_argument("conv2d: channels do not match the weights and group");
    if (sh <= 0 || sw <= 0 || dh <= 0 || dw <= 0 || pt < 0 || pl < 0 || pb < 0 || pr < 0)
        throw std::invalid_argument("conv2d: strides and dilations must be positive, pads non-negative");
    if (b && static_cast<int64_t>(b->shape(0)) != s.m) throw std::invalid_argument("conv2d: bias size is not M");
    s.oh = (s.h + pt + pb - (s.kh - 1) * dh - 1) / sh + 1;
    s.ow = (s.w + pl + pr - (s.kw - 1) * dw - 1) / sw + 1;
    if (s.oh <= 0 || s.ow <= 0 || s.kh <= 0 || s.kw <= 0)
        throw std::invalid_argument("conv2d: the kernel is larger than the padded input");
    if (act < ACT_NONE || act > ACT_SIGMOID) throw std::invalid_argument("conv2d: unknown activation");
    if (threads < 1 || threads > 64) throw std::invalid_argument("conv2d: threads must be in [1, 64]");
    if (residual && (static_cast<int64_t>(residual->shape(0)) != s.n || static_cast<int64_t>(residual->shape(1)) != s.m ||
                     static_cast<int64_t>(residual->shape(2)) != s.oh || static_cast<int64_t>(residual->shape(3)) != s.ow))
        throw std::invalid_argument("conv2d: the residual's shape is not the output's");
    if (winograd && (static_cast<int64_t>(winograd->shape(0)) != 16 || static_cast<int64_t>(winograd->shape(1)) != s.m ||
                     static_cast<int64_t>(winograd->shape(2)) != s.c || s.group != 1))
        throw std::invalid_argument("conv2d: the Winograd weights are not 16 x M x C (one group)");
    if (packed && (static_cast<int64_t>(packed->shape(0)) != static_cast<int64_t>(w.size()) || use != "avx2"))
        throw std::invalid_argument("conv2d: the packed weights are not conv2d_pack_weights(w) (isa avx2)");
    const float *wpacked = packed ? packed->data() : nullptr;
    Epilogue ep;
    ep.act = relu && act == ACT_NONE ? ACT_RELU : act;
    ep.a = a, ep.b = act_b;
    ep.residual = residual ? residual->data() : nullptr;
    const size_t size = static_cast<size_t>(s.n * s.m * s.oh * s.ow);
    const float *bias = b ? b->data() : nullptr;
    OutBuf lent;
    const float *ins[] = {x.data(), w.data(), bias, residual ? residual->data() : nullptr};
    const size_t ins_size[] = {x.size(), w.size(), b ? b->size() : 0, residual ? residual->size() : 0};
    if (takes_out(out, s, lent, ins, ins_size)) {  // the buffer pool's array: written and returned as it is
        float *y = lent.data();
        {
            nb::gil_scoped_release release;
            (use == "avx512" ? run_avx512 : run_avx2)(s, x.data(), w.data(), bias, ep, y, threads,
                                                      winograd ? winograd->data() : nullptr, wpacked);
        }
        return nb::borrow(out);
    }
    std::unique_ptr<float[]> y(new float[size ? size : 1]);
    {
        nb::gil_scoped_release release;
        (use == "avx512" ? run_avx512 : run_avx2)(s, x.data(), w.data(), bias, ep, y.get(), threads,
                                                  winograd ? winograd->data() : nullptr, wpacked);
    }
    nb::capsule owner(y.get(), [](void *ptr) noexcept { delete[] static_cast<float *>(ptr); });
    float *data = y.release();
    return nb::cast(Out4(data,
                         {static_cast<size_t>(s.n), static_cast<size_t>(s.m), static_cast<size_t>(s.oh),
                          static_cast<size_t>(s.ow)},
                         owner));
}

// Weights w (M x C / group x kh x kw) packed for the AVX2 tile (pack_weights), for a caller that
// keeps them with the weights (conv2d's `packed`); None where the tiled driver would not read
// them (another ISA, a 1 x 1 kernel, fewer than PACK_MIN_BLOCKS row blocks per group)
nb::object pack_weights_py(In4 w, int64_t group) {
    const int64_t M = w.shape(0), cg = w.shape(1), K = cg * w.shape(2) * w.shape(3);
    if (group <= 0 || M % group) throw std::invalid_argument("conv2d_pack_weights: M is not a multiple of group");
    if (!packs_weights(default_isa() == std::string("avx2"), M / group, w.shape(2), w.shape(3))) return nb::none();
    std::unique_ptr<float[]> p(new float[std::max<int64_t>(1, M * K)]);
    {
        nb::gil_scoped_release release;
        for (int64_t g = 0; g < group; ++g)
            pack_weights(w.data() + g * (M / group) * K, M / group, K, AVX2_MR, p.get() + g * (M / group) * K);
    }
    nb::capsule owner(p.get(), [](void *ptr) noexcept { delete[] static_cast<float *>(ptr); });
    float *data = p.release();
    return nb::cast(Out1(data, {static_cast<size_t>(M * K)}, owner));
}

// The Winograd transform of 3 x 3 weights w (M x C x 3 x 3): 16 x M x C floats (conv2d's
// `winograd`, for a caller that keeps it with the weights). Finite weights only: conv2d does not
// re-check the weights behind a given transform, and the transform's sums would spread an
// infinity or NaN over outputs that do not read it
Out3 winograd_weights_py(In4 w) {
    if (w.shape(2) != 3 || w.shape(3) != 3) throw std::invalid_argument("conv2d_winograd_weights: the kernel is not 3 x 3");
    const int64_t M = w.shape(0), C = w.shape(1);
    for (size_t i = 0; i < w.size(); ++i)
        if (!std::isfinite(w.data()[i]))
            throw std::invalid_argument("conv2d_winograd_weights: the weights hold an infinity or a NaN");
    std::unique_ptr<float[]> u(new float[std::max<int64_t>(1, 16 * M * C)]);
    {
        nb::gil_scoped_release release;
        winograd_weights(w.data(), M, C, u.get());
    }
    nb::capsule owner(u.get(), [](void *ptr) noexcept { delete[] static_cast<float *>(ptr); });
    float *data = u.release();
    return Out3(data, {16, static_cast<size_t>(M), static_cast<size_t>(C)}, owner);
}

// Whether conv2d runs this geometry (input n c h w, weights m x c/group x kh x kw) by Winograd,
// `cached`: with the weights' transform passed in
bool winograd_applies_py(int64_t c, int64_t h, int64_t w, int64_t m, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                         int64_t dh, int64_t dw, int64_t pt, int64_t pl, int64_t pb, int64_t pr, int64_t group,
                         int64_t n, bool cached) {
    if (default_isa() != std::string("avx2") || sh <= 0 || sw <= 0 || dh <= 0 || dw <= 0) return false;
    Shape s{};
    s.n = n, s.c = c, s.h = h, s.w = w, s.m = m, s.kh = kh, s.kw = kw, s.sh = sh, s.sw = sw, s.dh = dh, s.dw = dw;
    s.pt = pt, s.pl = pl, s.group = group;
    s.oh = (h + pt + pb - (kh - 1) * dh - 1) / sh + 1;
    s.ow = (w + pl + pr - (kw - 1) * dw - 1) / sw + 1;
    return s.oh > 0 && s.ow > 0 && winograd_applies(s, cached);
}

using InOut = nb::ndarray<float, nb::c_contig, nb::device::cpu>;
using InAny = nb::ndarray<const float, nb::c_contig, nb::device::cpu>;

// y = act(y + residual) in place, over the whole array: the epilogue of a convolution that
// another kernel (BLAS) computed
void epilogue_inplace(InOut y, int act, float a, float b, std::optional<InAny> residual, const std::string &isa) {
    const std::string use = isa.empty() ? default_isa() : isa;
    if (use == "avx512" ? !has_avx512f() : use == "avx2" ? !has_avx2_fma() : true)
        throw std::invalid_argument("epilogue: this CPU cannot run isa '" + use + "'");
    if (act < ACT_NONE || act > ACT_SIGMOID) throw std::invalid_argument("epilogue: unknown activation");
    if (residual && residual->size() != y.size()) throw std::invalid_argument("epilogue: the residual's size is not y's");
    Epilogue ep;
    ep.act = act, ep.a = a, ep.b = b;
    const float *res = residual ? residual->data() : nullptr;
    const int64_t n = static_cast<int64_t>(y.size());
    nb::gil_scoped_release release;
    (use == "avx512" ? epilogue_avx512 : epilogue_avx2)(ep, y.data(), res, n);
}

}  // namespace
}  // namespace onnx_light_conv

void bind_conv(nb::module_ &m) {
    using namespace onnx_light_conv;
    m.def("conv2d_isa", &best_isa, "The widest native conv2d kernel this CPU runs: 'avx512', 'avx2' or ''");
    m.def("conv2d_default_isa", &default_isa,
          "The kernel conv2d runs when its isa is '': 'avx2' wherever the CPU has AVX2 + FMA, else conv2d_isa()");
    m.def("conv2d_supported", &conv2d_supported, "True when this CPU runs a native conv2d (AVX-512F or AVX2 + FMA)");
    m.def("conv2d", &conv2d, nb::arg("x"), nb::arg("w"), nb::arg("b").none(), nb::arg("sh"), nb::arg("sw"),
          nb::arg("dh"), nb::arg("dw"), nb::arg("pt"), nb::arg("pl"), nb::arg("pb"), nb::arg("pr"), nb::arg("group"),
          nb::arg("relu"), nb::arg("isa") = "", nb::arg("act") = 0, nb::arg("a") = 0.0f, nb::arg("b_act") = 0.0f,
          nb::arg("residual").none() = nb::none(), nb::arg("threads") = 1, nb::arg("winograd").none() = nb::none(),
          nb::arg("out").none() = nb::none(), nb::arg("packed").none() = nb::none(),
          "The convolution (+ epilogue), float32 (N, M, OH, OW); written into `out` (and `out` returned) when it is a "
          "writeable C-contiguous float32 array of that shape, else a new array");
    m.def("conv2d_pack_weights", &pack_weights_py, nb::arg("w"), nb::arg("group") = 1,
          "Weights (M, C / group, kh, kw) packed for conv2d's `packed` (float32, M C / group kh kw), or None where "
          "conv2d would not read them");
    m.def("conv2d_winograd_weights", &winograd_weights_py, nb::arg("w"),
          "The Winograd F(2x2, 3x3) transform of 3 x 3 weights (M, C, 3, 3): float32 (16, M, C)");
    m.def("conv2d_winograd_applies", &winograd_applies_py, nb::arg("c"), nb::arg("h"), nb::arg("w"), nb::arg("m"),
          nb::arg("kh"), nb::arg("kw"), nb::arg("sh"), nb::arg("sw"), nb::arg("dh"), nb::arg("dw"), nb::arg("pt"),
          nb::arg("pl"), nb::arg("pb"), nb::arg("pr"), nb::arg("group"), nb::arg("n") = 1, nb::arg("cached") = true,
          "Whether conv2d (isa avx2) runs this geometry by Winograd F(2x2, 3x3) (cached: given its weights)");
    m.def("conv_epilogue", &epilogue_inplace, nb::arg("y"), nb::arg("act"), nb::arg("a"), nb::arg("b"),
          nb::arg("residual").none(), nb::arg("isa") = "",
          "y = act(y + residual) in place (the activation codes of src/conv.h)");
}
