// Winograd F(2x2, 3x3) for 3x3, stride-1, undilated, ungrouped float32 convolutions (AVX2 +
// FMA), the formulas of Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks"
// (2015). Every 2 x 2 block of output pixels (a tile) of output plane m is
//     Y = A^T [ sum_c (G g[m, c] G^T) . (B^T d[c] B) ] A        (. elementwise, 4 x 4)
// with d[c] the 4 x 4 input window of the tile in plane c and
//     B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],  G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1],
//     A^T = [1 1 1 0; 0 1 -1 -1].
// So the 9 multiply-adds per output pixel and input channel of the direct convolution become
// 4 (16 per tile of 4 pixels): 16 independent GEMMs (one per cell xi of the 4 x 4 transform
// domain) U[xi] (M x C) times V[xi] (C x tiles), run by the AVX2 register tile of
// src/conv_avx2.cpp reading V's rows in place. The transforms only add, subtract and halve,
// so the result differs from the direct sum by float rounding alone (a few ulps more, see
// tests/runtime/test_conv_winograd.py). Tiles go in blocks of consecutive tiles (flat over
// the output's tile rows), so that one block's V and GEMM outputs stay in L2.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "conv.h"
#include "simd.h"

namespace onnx_light_conv {

// U[xi][m][c] = (G g G^T)[xi] of the 3 x 3 kernels g = w[m, c] (M x C x 3 x 3), in double
void winograd_weights(const float *w, int64_t M, int64_t C, float *U) {
    const int64_t mcs = M * C;
    for (int64_t mc = 0; mc < mcs; ++mc) {
        const float *g = w + mc * 9;
        double t[4][3];  // G g
        for (int j = 0; j < 3; ++j) {
            const double g0 = g[j], g1 = g[3 + j], g2 = g[6 + j];
            t[0][j] = g0, t[1][j] = 0.5 * (g0 + g1 + g2), t[2][j] = 0.5 * (g0 - g1 + g2), t[3][j] = g2;
        }
        for (int i = 0; i < 4; ++i) {
            const double u[4] = {t[i][0], 0.5 * (t[i][0] + t[i][1] + t[i][2]), 0.5 * (t[i][0] - t[i][1] + t[i][2]),
                                 t[i][2]};
            for (int j = 0; j < 4; ++j) U[(i * 4 + j) * mcs + mc] = static_cast<float>(u[j]);
        }
    }
}

bool winograd_applies(const Shape &s, bool cached) {
    // 3 x 3, stride 1, no dilation, one group, at least 64 input and output channels (the
    // transforms cost 16 values per tile and channel beside 16 M C products per tile) and 49
    // tiles; when the weights' transform is not cached (16 M C values per call), at least twice
    // as many tiles as channels. Measured (bench_conv.py, one process, against onnxruntime),
    // cached / tiled GEMM: 64 -> 64 at 56 x 56 1.12x / 1.60x, at 80 x 80 0.78x / 1.52x;
    // 128 -> 128 at 28 x 28 1.38x / 1.47x, at 40 x 40 0.88x / 1.31x; 256 -> 256 at 14 x 14
    // 1.24x / 1.35x, at 20 x 20 0.97x / 1.41x; but fewer tiles or channels lose: 512 -> 512 at
    // 7 x 7 1.24x / 1.16x, 128 -> 128 at 10 x 10 1.32x / 1.23x, 32 -> 32 at 40 x 40 1.06x / 0.97x
    const bool geometry = s.kh == 3 && s.kw == 3 && s.sh == 1 && s.sw == 1 && s.dh == 1 && s.dw == 1 && s.group == 1;
    if (!geometry || s.c < 64 || s.m < 64) return false;
    // ONNX_LIGHT_CONV_WINOGRAD=0: never (the tiled GEMM alone; read per call, for comparisons)
    if (const char *off = std::getenv("ONNX_LIGHT_CONV_WINOGRAD"); off && off[0] == '0') return false;
    const int64_t tiles = s.n * ((s.oh + 1) / 2) * ((s.ow + 1) / 2);
    return tiles >= 49 && (cached || tiles >= 2 * std::max(s.c, s.m));
}

#if ONNX_LIGHT_AVX512
namespace {

// whether p[0 .. n) holds no infinity and no NaN (v * 0 is NaN exactly for those)
AVX2 bool all_finite(const float *p, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    const __m256 zero = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(p + i), zero));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc);
    float rest = 0.0f;
    for (; i < n; ++i) rest += p[i] * 0.0f;
    for (float v : lanes) rest += v;
    return rest == 0.0f;
}

// the even / odd lanes of (a, b): a0 a2 a4 a6 b0 b2 b4 b6 / a1 a3 a5 a7 b1 b3 b5 b7
AVX2 inline __m256 evens8(__m256 a, __m256 b) {
    const __m256 t = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}
AVX2 inline __m256 odds8(__m256 a, __m256 b) {
    const __m256 t = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}

// a - b and a + b of vectors and of floats (functors: lambdas do not inherit AVX2)
struct VSub {
    AVX2 __m256 operator()(__m256 a, __m256 b) const { return _mm256_sub_ps(a, b); }
};
struct VAdd {
    AVX2 __m256 operator()(__m256 a, __m256 b) const { return _mm256_add_ps(a, b); }
};
struct FSub {
    float operator()(float a, float b) const { return a - b; }
};
struct FAdd {
    float operator()(float a, float b) const { return a + b; }
};

// B^T d B of one 4 x 4 window, d[a][b] (row a, column b), in place; T a float or an __m256
template <class T, class Sub, class Add>
AVX2 inline void input_transform(T d[4][4], Sub sub, Add add) {
    for (int a = 0; a < 4; ++a) {
        const T t0 = sub(d[a][0], d[a][2]), t1 = add(d[a][1], d[a][2]), t2 = sub(d[a][2], d[a][1]);
        const T t3 = sub(d[a][1], d[a][3]);
        d[a][0] = t0, d[a][1] = t1, d[a][2] = t2, d[a][3] = t3;
    }
    for (int b = 0; b < 4; ++b) {
        const T t0 = sub(d[0][b], d[2][b]), t1 = add(d[1][b], d[2][b]), t2 = sub(d[2][b], d[1][b]);
        const T t3 = sub(d[1][b], d[3][b]);
        d[0][b] = t0, d[1][b] = t1, d[2][b] = t2, d[3][b] = t3;
    }
}

// A^T m A of one 4 x 4 cell block m[a][b]: y[i][j], the 2 x 2 output pixels
template <class T, class Sub, class Add>
AVX2 inline void output_transform(const T m[4][4], T y[2][2], Sub sub, Add add) {
    T s[4][2];
    for (int a = 0; a < 4; ++a) {
        s[a][0] = add(add(m[a][0], m[a][1]), m[a][2]);
        s[a][1] = sub(sub(m[a][1], m[a][2]), m[a][3]);
    }
    for (int j = 0; j < 2; ++j) {
        y[0][j] = add(add(s[0][j], s[1][j]), s[2][j]);
        y[1][j] = sub(sub(s[1][j], s[2][j]), s[3][j]);
    }
}

struct Plan {
    int64_t th, tw, tiles, tb, tbp, blocks, kc;
    int64_t mchunks = 1, mblocks = 1;  // output channels in mchunks ranges of whole mr-row blocks
    // output channels [m0, m1) of chunk mc
    int64_t m0(int64_t mc, int64_t mr, int64_t M) const { return std::min(M, mc * mblocks / mchunks * mr); }
};

// V[xi][c][f - f0] for the tiles f in [f0, f1) of sample n and channels c in [c0, c1) (c1 < 0:
// all): plane c of the bordered input `xp` (planes of hp x wp), 8 tiles of one tile row at a
// time where they fit, else one
AVX2 void transform_input(const Shape &s, const Plan &q, const float *xp, int64_t hp, int64_t wp, int64_t f0,
                          int64_t f1, float *V, int64_t c0 = 0, int64_t c1 = -1) {
    const VSub vsub;
    const VAdd vadd;
    const FSub fsub;
    const FAdd fadd;
    const int64_t stride = s.c * q.tbp;  // between cells xi of V
    for (int64_t c = c0; c < (c1 < 0 ? s.c : c1); ++c) {
        const float *plane = xp + c * hp * wp;
        float *vc = V + c * q.tbp - f0;
        for (int64_t f = f0; f < f1;) {
            const int64_t ti = f / q.tw, tj = f % q.tw;
            const float *src = plane + 2 * ti * wp + 2 * tj;
            if (tj + 8 <= q.tw && f + 8 <= f1) {
                __m256 d[4][4];
                for (int a = 0; a < 4; ++a) {
                    const float *p = src + a * wp;
                    const __m256 l0 = _mm256_loadu_ps(p), l1 = _mm256_loadu_ps(p + 8);
                    const __m256 l2 = _mm256_loadu_ps(p + 2), l3 = _mm256_loadu_ps(p + 10);
                    d[a][0] = evens8(l0, l1), d[a][1] = odds8(l0, l1), d[a][2] = evens8(l2, l3), d[a][3] = odds8(l2, l3);
                }
                input_transform(d, vsub, vadd);
                for (int xi = 0; xi < 16; ++xi) _mm256_storeu_ps(vc + xi * stride + f, d[xi / 4][xi % 4]);
                f += 8;
            } else {
                float d[4][4];
                for (int a = 0; a < 4; ++a)
                    for (int b = 0; b < 4; ++b) d[a][b] = src[a * wp + b];
                input_transform(d, fsub, fadd);
                for (int xi = 0; xi < 16; ++xi) vc[xi * stride + f] = d[xi / 4][xi % 4];
                f += 1;
            }
        }
    }
}

// the output pixels of tiles [f0, f1) of sample n from the GEMM outputs Mo[xi][m][f - f0],
// plus the bias, then the epilogue over each written run of output pixels
AVX2 void transform_output(const TileKernel &t, const Shape &s, const Plan &q, const float *Mo, const float *bias,
                           const Epilogue &ep, float *y, int64_t n, int64_t f0, int64_t f1, int64_t mlo, int64_t mhi) {
    const VSub vsub;
    const VAdd vadd;
    const FSub fsub;
    const FAdd fadd;
    const int64_t stride = s.m * q.tbp;
    const bool post = ep.act != ACT_NONE || ep.residual;
    for (int64_t m = mlo; m < mhi; ++m) {
        const float *mm = Mo + m * q.tbp - f0;
        const float b0 = bias ? bias[m] : 0.0f;
        const __m256 vb = _mm256_set1_ps(b0);
        float *plane = y + (n * s.m + m) * s.oh * s.ow;
        for (int64_t f = f0; f < f1;) {
            const int64_t ti = f / q.tw, tj0 = f % q.tw, tj1 = std::min(q.tw, tj0 + (f1 - f));
            const int64_t oi = 2 * ti;
            const bool two = oi + 1 < s.oh;
            float *y0 = plane + oi * s.ow, *y1 = y0 + s.ow;
            int64_t tj = tj0;
            for (; tj + 8 <= tj1 && 2 * (tj + 8) <= s.ow && two; tj += 8) {
                const int64_t g = ti * q.tw + tj;
                __m256 c[4][4], o[2][2];
                for (int xi = 0; xi < 16; ++xi) c[xi / 4][xi % 4] = _mm256_loadu_ps(mm + xi * stride + g);
                output_transform(c, o, vsub, vadd);
                for (int i = 0; i < 2; ++i) {
                    const __m256 e = _mm256_add_ps(o[i][0], vb), od = _mm256_add_ps(o[i][1], vb);
                    const __m256 lo = _mm256_unpacklo_ps(e, od), hi = _mm256_unpackhi_ps(e, od);
                    float *row = (i ? y1 : y0) + 2 * tj;
                    _mm256_storeu_ps(row, _mm256_permute2f128_ps(lo, hi, 0x20));
                    _mm256_storeu_ps(row + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
                }
            }
            for (; tj < tj1; ++tj) {
                const int64_t g = ti * q.tw + tj;
                float c[4][4], o[2][2];
                for (int xi = 0; xi < 16; ++xi) c[xi / 4][xi % 4] = mm[xi * stride + g];
                output_transform(c, o, fsub, fadd);
                for (int i = 0; i < (two ? 2 : 1); ++i)
                    for (int j = 0; j < 2 && 2 * tj + j < s.ow; ++j) (i ? y1 : y0)[2 * tj + j] = o[i][j] + b0;
            }
            if (post) {
                const int64_t j0 = 2 * tj0, len = std::min(2 * tj1, s.ow) - j0;
                for (int i = 0; i < (two ? 2 : 1); ++i) {
                    float *row = (i ? y1 : y0) + j0;
                    t.epilogue(ep, row, ep.residual ? ep.residual + (row - y) : nullptr, len);
                }
            }
            f += tj1 - tj0;
        }
    }
}

// The 16 GEMMs of one block: Mo[xi] (rows [mlo, mhi) of M x tbp) = U[xi] (M x C) V[xi] (C x tbp),
// by the tile reading V's rows in place (row k of a panel at koff[k] = k tbp)
void block_gemms(const TileKernel &t, const Shape &s, const Plan &q, const float *U, const float *V, float *Mo,
                 int64_t tiles, int64_t mlo, int64_t mhi) {
    int64_t koff[512];
    for (int64_t k = 0; k < q.kc; ++k) koff[k] = k * q.tbp;
    const int64_t panels = (tiles + t.nr - 1) / t.nr;
    for (int xi = 0; xi < 16; ++xi) {
        const float *u = U + xi * s.m * s.c, *v = V + xi * s.c * q.tbp;
        float *mo = Mo + xi * s.m * q.tbp;
        for (int64_t c0 = 0; c0 < s.c; c0 += q.kc) {
            const int64_t kc = std::min(q.kc, s.c - c0);
            // each row block of U[xi] (in L1) over all the block's panels: U read once per block
            for (int64_t m0 = mlo; m0 < mhi; m0 += t.mr)
                for (int64_t j = 0; j < panels; ++j)
                    t.direct(kc, u + m0 * s.c + c0, s.c, v + c0 * q.tbp + j * t.nr, koff, mo + m0 * q.tbp + j * t.nr,
                             q.tbp, std::min(t.mr, mhi - m0), std::min(t.nr, tiles - j * t.nr), nullptr, c0 == 0, false);
        }
    }
}

}  // namespace

// x's planes bordered into `pad` by the workers, each also checking its plane (and the items
// past them a chunk of w, unless w is null) for infinities and NaNs, then calling plane(n, c)
// for the plane it filled: false when any infinity or NaN is found
template <class Plane>
AVX2 bool fill_checked(PaddedPlanes &pad, const Shape &s, const float *x, const float *w, int threads,
                       const Plane &plane) {
    constexpr int64_t CHUNK = 1 << 16;
    const int64_t planes = s.n * s.c, wsize = s.m * s.c * 9, wchunks = w ? (wsize + CHUNK - 1) / CHUNK : 0;
    std::atomic<bool> finite{true};
    parallel_items(threads, planes + wchunks, [&](int, int64_t i) {
        const bool ok = i < planes ? all_finite(x + i * s.h * s.w, s.h * s.w)
                                   : all_finite(w + (i - planes) * CHUNK, std::min(CHUNK, wsize - (i - planes) * CHUNK));
        if (!ok) finite.store(false, std::memory_order_relaxed);
        if (i >= planes) return;
        pad.fill_plane(s, x, i);
        plane(i / s.c, i % s.c);
    });
    pad.bordered = planes;
    return finite.load();
}

struct NoPlane {
    void operator()(int64_t, int64_t) const {}
};

AVX2 void run_winograd_avx2(const TileKernel &t, const Shape &s, const float *x, const float *w, const float *U_given,
                            const float *bias, const Epilogue &ep, float *y, int threads) {
    Plan q{};
    q.th = (s.oh + 1) / 2, q.tw = (s.ow + 1) / 2, q.tiles = q.th * q.tw;
    // a block's V and GEMM outputs: 16 tbp (C + M) floats, about 512 KiB at most
    q.tb = std::clamp<int64_t>((128 * 1024 / (16 * (s.c + s.m))) / t.nr * t.nr, 4 * t.nr, 8 * t.nr);
    q.tb = std::min(q.tb, (q.tiles + t.nr - 1) / t.nr * t.nr);
    q.tbp = q.tb;
    q.blocks = (q.tiles + q.tb - 1) / q.tb;
    const int64_t kblocks = (s.c + t.kc - 1) / t.kc;
    q.kc = (s.c + kblocks - 1) / kblocks;
    // threaded with fewer than 3 blocks per worker (14 x 14: one block, 28 x 28: three and a
    // sliver): the output channels are split too, and every block's V is transformed once
    // beforehand, plane by plane as the workers border the input (V of all blocks then stays in
    // memory: a few blocks only), instead of by each block's item
    q.mblocks = (s.m + t.mr - 1) / t.mr;
    if (threads > 1 && s.n * q.blocks < 3 * threads)
        q.mchunks = std::min(q.mblocks, (3 * threads + s.n * q.blocks - 1) / (s.n * q.blocks));
    const bool shared = q.mchunks > 1;
    // the input zero-bordered: 2 th + 2 rows and 2 tw + 2 columns cover every tile's window
    Shape tiled = s;
    tiled.oh = 2 * q.th, tiled.ow = 2 * q.tw;
    PaddedPlanes pad(tiled, s.n * s.c, 2 * q.tw + 2, true, 0);
    const int64_t vsize = 16 * q.tbp * s.c;  // one block's V
    std::unique_ptr<float[]> vall(shared ? new float[s.n * q.blocks * vsize] : nullptr);
    const auto transform_plane = [&](int64_t n, int64_t c) {
        const float *xp = pad.buf.get() + n * s.c * pad.hp * pad.wp;
        for (int64_t b = 0; b < q.blocks; ++b)
            transform_input(s, q, xp, pad.hp, pad.wp, b * q.tb, std::min(q.tiles, (b + 1) * q.tb),
                            vall.get() + (n * q.blocks + b) * vsize, c, c + 1);
    };
    // the transforms add and subtract neighbours: an infinity would become a NaN, and a NaN
    // reach pixels of its tile that do not read it; such inputs take the direct sum instead.
    // A given U comes from finite weights (conv2d_winograd_weights refuses others): only x is
    // checked then (before, every call re-read all of w: resnet18's 3 x 3 weights, ~40 MB a run)
    const float *wcheck = U_given ? nullptr : w;
    const bool finite = shared ? fill_checked(pad, s, x, wcheck, threads, transform_plane)
                               : fill_checked(pad, s, x, wcheck, threads, NoPlane{});
    if (!finite) return run_tiled(t, s, x, w, bias, ep, y, threads);
    std::unique_ptr<float[]> owned;
    const float *U = U_given;
    if (!U) {
        owned.reset(new float[16 * s.m * s.c]);
        winograd_weights(w, s.m, s.c, owned.get());
        U = owned.get();
    }
    const int64_t items = s.n * q.blocks * q.mchunks;
    threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, items)));
    const int64_t per = (shared ? 0 : vsize) + 16 * q.tbp * s.m + 64;  // one worker's V and Mo
    float *buf = thread_scratch(1, static_cast<size_t>(threads * per + 16));
    float *base = reinterpret_cast<float *>((reinterpret_cast<uintptr_t>(buf) + 63) & ~uintptr_t(63));
    parallel_items(threads, items, [&](int worker, int64_t i) {
        const int64_t mc = i % q.mchunks, b = i / q.mchunks;
        const int64_t n = b / q.blocks, f0 = b % q.blocks * q.tb, f1 = std::min(q.tiles, f0 + q.tb);
        const int64_t mlo = q.m0(mc, t.mr, s.m), mhi = q.m0(mc + 1, t.mr, s.m);
        float *V = shared ? vall.get() + b * vsize : base + worker * per, *Mo = base + worker * per + (shared ? 0 : vsize);
        if (!shared) transform_input(s, q, pad.buf.get() + n * s.c * pad.hp * pad.wp, pad.hp, pad.wp, f0, f1, V);
        block_gemms(t, s, q, U, V, Mo, f1 - f0, mlo, mhi);
        transform_output(t, s, q, Mo, bias, ep, y, n, f0, f1, mlo, mhi);
    });
}
#else
void run_winograd_avx2(const TileKernel &, const Shape &, const float *, const float *, const float *, const float *,
                       const Epilogue &, float *, int) {}
#endif  // ONNX_LIGHT_AVX512

}  // namespace onnx_light_conv
