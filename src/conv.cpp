// 2-D convolution for float32 NCHW tensors: im2col packed one panel of NR output
// pixels at a time, multiplied by the packed weights in an 8 x 32 register-blocked
// AVX-512 kernel, with the bias and an optional ReLU applied as the tile is stored.
//
// For one sample n and group g, with K = C/g * kh * kw and P = oh * ow:
//     y[n, g*Mg + m, p] = bias[g*Mg + m] + sum_k W[g*Mg + m, k] * cols[k, p]
//     cols[(c, a, b), (i, j)] = x[n, g*Cg + c, i*sh + a*dh - pt, j*sw + b*dw - pl]   (0 outside)
// The cols panel (K x NR) stays in L1/L2 while every row block of W runs over it, so
// the full im2col matrix is never written. The pure-Python twin is the numpy im2col +
// matmul kernel in onnx_light/runtime/kernels/conv.py; this one runs when the CPU has
// AVX-512F, and its AVX2 + FMA twin (src/conv_avx2.cpp) when it has only those.
// Stride-1 columns are not even packed: the kernel reads the taps' rows of the (padded)
// input in place, 32 outputs of one output row at a time. Depthwise weights (one input
// channel per group) take their own loop (depthwise_run), one FMA per tap per vector.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "conv.h"
#include "simd.h"

namespace nb = nanobind;

namespace onnx_light_conv {
namespace {

constexpr int64_t MR = 8;    // output channels per register tile
constexpr int64_t NR = 32;   // output pixels per register tile (two 16-float vectors)
constexpr int64_t KC = 384;  // reduction block: a K x NR panel of 48 KiB at most

using In4 = nb::ndarray<const float, nb::ndim<4>, nb::c_contig, nb::device::cpu>;
using In1 = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
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
AVX512 void pack_cols(const Shape &s, const float *x, int64_t k0, int64_t kc, int64_t p0, float *cols) {
    Run runs[NR];
    const int64_t nruns = panel_runs(s, p0, NR, runs), kk = s.kh * s.kw;
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    int64_t c = k0 / kk, a = (k0 % kk) / s.kw, b = k0 % s.kw;
    for (int64_t k = k0; k < k0 + kc; ++k) {
        float *dst = cols + (k - k0) * NR;
        _mm512_storeu_ps(dst, _mm512_setzero_ps());
        _mm512_storeu_ps(dst + 16, _mm512_setzero_ps());
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

// C[r, 0:cols] (+)= sum_k A[k][r] * Bk[0:cols] for r < rows, where row k of the pixel
// panel Bk is B + k * NR (a packed panel) or, when `koff` is given, B + koff[k] (read in
// place from the padded input). `first` adds bias[r] instead of reading C; `relu` clamps
// at zero when storing.
template <bool Direct>
AVX512 void tile_8x32(int64_t kc, const float *A, const float *B, const int64_t *koff, float *C, int64_t ldc,
                      int64_t rows, int64_t cols, const float *bias, bool first, bool relu) {
    const __mmask16 m0 = cols >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << cols) - 1);
    const __mmask16 m1 = cols >= 32 ? 0xFFFF : cols <= 16 ? 0 : static_cast<__mmask16>((1u << (cols - 16)) - 1);
    __m512 acc[MR][2];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; ++k) {
        __m512 b0, b1;
        if constexpr (Direct) {
            const float *row = B + koff[k];
            b0 = _mm512_maskz_loadu_ps(m0, row);
            b1 = _mm512_maskz_loadu_ps(m1, row + 16);
        } else {
            b0 = _mm512_loadu_ps(B + k * NR);
            b1 = _mm512_loadu_ps(B + k * NR + 16);
        }
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
            const __m512 a = _mm512_set1_ps(A[k * MR + r]);
            acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
        }
    }
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
            v0 = _mm512_max_ps(v0, zero);
            v1 = _mm512_max_ps(v1, zero);
        }
        _mm512_mask_storeu_ps(c, m0, v0);
        _mm512_mask_storeu_ps(c + 16, m1, v1);
    }
}

// Depthwise weights (one input channel per group, `mult` output channels each): every
// output plane is its input plane filtered by one kh x kw kernel. Each input plane is
// copied into the middle of a zero-bordered buffer (borders zeroed once), so every tap
// is an unmasked load (stride 1), two loads and a permute (stride 2) or a gather; up to
// 128 columns of an output row accumulate at once (8 independent FMA chains). No im2col
// and no tile rows left empty.
AVX512 void depthwise_run(const Shape &s, const float *x, const float *w, const float *bias, bool relu, float *y) {
    constexpr int64_t V = 8;  // vectors of 16 columns per block
    const int64_t mult = s.m / s.group, P = s.oh * s.ow, taps = s.kh * s.kw;
    const int64_t ow16 = (s.ow + 15) / 16 * 16;
    PaddedPlanes pad(s, 1, ow16 * s.sw + (s.kw - 1) * s.dw + 16, true);
    const __m512 zero = _mm512_setzero_ps();
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i steps = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                             _mm512_set1_epi32(static_cast<int>(s.sw)));
    for (int64_t n = 0; n < s.n; ++n)
        for (int64_t c = 0; c < s.c; ++c) {
            const float *plane = pad.fill(s, x + (n * s.c + c) * s.h * s.w, 1);
            for (int64_t m = c * mult; m < (c + 1) * mult; ++m) {
                const float *k = w + m * taps;
                float *out = y + (n * s.m + m) * P;
                const __m512 start = _mm512_set1_ps(bias ? bias[m] : 0.0f);
                for (int64_t i = 0; i < s.oh; ++i)
                    for (int64_t jb = 0; jb < s.ow; jb += 16 * V) {
                        const int64_t vectors = std::min<int64_t>(V, (s.ow - jb + 15) / 16);
                        __m512 acc[V];
#pragma GCC unroll 8
                        for (int64_t v = 0; v < V; ++v) acc[v] = start;
                        for (int64_t a = 0; a < s.kh; ++a) {
                            const float *row = plane + (i * s.sh + a * s.dh) * pad.wp;
                            for (int64_t b = 0; b < s.kw; ++b) {
                                const __m512 kv = _mm512_set1_ps(k[a * s.kw + b]);
                                const float *tap = row + jb * s.sw + b * s.dw;  // column of output jb
#pragma GCC unroll 8
                                for (int64_t v = 0; v < V; ++v) {
                                    if (v >= vectors) break;
                                    const float *src = tap + 16 * v * s.sw;
                                    __m512 in;
                                    if (s.sw == 1) {
                                        in = _mm512_loadu_ps(src);
                                    } else if (s.sw == 2) {
                                        in = _mm512_permutex2var_ps(_mm512_loadu_ps(src), even,
                                                                    _mm512_loadu_ps(src + 16));
                                    } else {
                                        in = _mm512_i32gather_ps(steps, src, 4);
                                    }
                                    acc[v] = _mm512_fmadd_ps(kv, in, acc[v]);
                                }
                            }
                        }
#pragma GCC unroll 8
                        for (int64_t v = 0; v < V; ++v) {
                            if (v >= vectors) break;
                            const int64_t j0 = jb + 16 * v;
                            const __m512 r = relu ? _mm512_max_ps(acc[v], zero) : acc[v];
                            _mm512_mask_storeu_ps(out + i * s.ow + j0, bits(0, s.ow - j0), r);
                        }
                    }
            }
        }
}

}  // namespace

AVX512 void run_avx512(const Shape &s, const float *x, const float *w, const float *bias, bool relu, float *y) {
    const int64_t cg = s.c / s.group, mg = s.m / s.group;
    // one input channel per group and few outputs each (more fill the register tile's rows)
    if (cg == 1 && s.group > 1 && 2 * mg <= MR) return depthwise_run(s, x, w, bias, relu, y);
    // in-place reads mask the tile's tail columns: no widened input
    static const TileKernel kernel{MR, NR, KC, false, tile_8x32<true>, tile_8x32<false>, pack_cols};
    run_tiled(kernel, s, x, w, bias, relu, y);
}
#else
}  // namespace
void run_avx512(const Shape &, const float *, const float *, const float *, bool, float *) {}
#endif  // ONNX_LIGHT_AVX512

void run_tiled(const TileKernel &t, const Shape &s, const float *x, const float *w, const float *bias, bool relu,
               float *y) {
    const int64_t cg = s.c / s.group, mg = s.m / s.group;
    const int64_t K = cg * s.kh * s.kw, P = s.oh * s.ow;
    std::unique_ptr<float[]> wpack(new float[(mg + t.mr - 1) / t.mr * t.mr * K]);
    const Shape gs = {s.n, cg, s.h, s.w, mg, s.kh, s.kw, s.sh, s.sw, s.dh, s.dw, s.pt, s.pl, s.oh, s.ow, 1};
    const int64_t row_tiles = (s.ow + t.nr - 1) / t.nr;
    const bool in_place = s.sw == 1 && 4 * s.ow >= 3 * row_tiles * t.nr;
    // in place: output row i, columns [j0, j0 + nr) read, for tap k, the contiguous cells
    // src[koff[k] + i*sh*wp + j0 + t] of the padded input of one (sample, group)
    PaddedPlanes pad(s, in_place ? cg : 0, (t.whole_loads ? row_tiles * t.nr : s.ow) + (s.kw - 1) * s.dw);
    std::unique_ptr<int64_t[]> koff(new int64_t[in_place ? K : 0]);
    if (in_place) pad.tap_offsets(s, K, koff.get());
    std::unique_ptr<float[]> cols(new float[in_place ? 0 : std::min(K, t.kc) * t.nr]);
    // every weight row block over one panel (in place from `src`, else packed from xg's p0)
    const auto panel = [&](const float *src, const float *xg, int64_t p0, float *C, int64_t ncols, const float *gbias) {
        for (int64_t k0 = 0; k0 < K; k0 += t.kc) {
            const int64_t kc = std::min(t.kc, K - k0);
            if (!in_place) t.pack(gs, xg, k0, kc, p0, cols.get());
            const bool first = k0 == 0, last = k0 + kc == K;
            for (int64_t mb = 0; mb * t.mr < mg; ++mb)
                (in_place ? t.in_place : t.packed)(kc, wpack.get() + (mb * K + k0) * t.mr, in_place ? src : cols.get(),
                                                   in_place ? koff.get() + k0 : nullptr, C + mb * t.mr * P, P,
                                                   std::min(t.mr, mg - mb * t.mr), ncols,
                                                   gbias ? gbias + mb * t.mr : nullptr, first, relu && last);
        }
    };
    for (int64_t g = 0; g < s.group; ++g) {
        pack_weights(w + g * mg * K, mg, K, t.mr, wpack.get());
        const float *gbias = bias ? bias + g * mg : nullptr;
        for (int64_t n = 0; n < s.n; ++n) {
            const float *xg = x + (n * s.c + g * cg) * s.h * s.w;
            float *yg = y + (n * s.m + g * mg) * P;
            if (in_place) {
                const float *src = pad.fill(s, xg, cg);
                for (int64_t i = 0; i < s.oh; ++i)
                    for (int64_t j0 = 0; j0 < s.ow; j0 += t.nr)
                        panel(src + i * s.sh * pad.wp + j0, xg, 0, yg + i * s.ow + j0, std::min(t.nr, s.ow - j0),
                              gbias);
            } else {
                for (int64_t p0 = 0; p0 < P; p0 += t.nr) panel(nullptr, xg, p0, yg + p0, std::min(t.nr, P - p0), gbias);
            }
        }
    }
}

namespace {

// The widest kernel this CPU runs: "avx512", "avx2" (with FMA) or "" (none: numpy's turn).
const char *best_isa() { return has_avx512f() ? "avx512" : has_avx2_fma() ? "avx2" : ""; }
bool conv2d_supported() { return *best_isa() != 0; }

Out4 conv2d(In4 x, In4 w, std::optional<In1> b, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pt,
            int64_t pl, int64_t pb, int64_t pr, int64_t group, bool relu, const std::string &isa) {
    const std::string use = isa.empty() ? best_isa() : isa;
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
    const size_t size = static_cast<size_t>(s.n * s.m * s.oh * s.ow);
    std::unique_ptr<float[]> y(new float[size ? size : 1]);
    const float *bias = b ? b->data() : nullptr;
    {
        nb::gil_scoped_release release;
        (use == "avx512" ? run_avx512 : run_avx2)(s, x.data(), w.data(), bias, relu, y.get());
    }
    nb::capsule owner(y.get(), [](void *ptr) noexcept { delete[] static_cast<float *>(ptr); });
    float *data = y.release();
    return Out4(data, {static_cast<size_t>(s.n), static_cast<size_t>(s.m), static_cast<size_t>(s.oh),
                       static_cast<size_t>(s.ow)},
                owner);
}

}  // namespace
}  // namespace onnx_light_conv

void bind_conv(nb::module_ &m) {
    using namespace onnx_light_conv;
    m.def("conv2d_isa", &best_isa, "The widest native conv2d kernel this CPU runs: 'avx512', 'avx2' or ''");
    m.def("conv2d_supported", &conv2d_supported, "True when this CPU runs a native conv2d (AVX-512F or AVX2 + FMA)");
    m.def("conv2d", &conv2d, nb::arg("x"), nb::arg("w"), nb::arg("b").none(), nb::arg("sh"), nb::arg("sw"),
          nb::arg("dh"), nb::arg("dw"), nb::arg("pt"), nb::arg("pl"), nb::arg("pb"), nb::arg("pr"), nb::arg("group"),
          nb::arg("relu"), nb::arg("isa") = "");
}
